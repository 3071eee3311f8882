"""The `nsq` format itself: what `spark.dataSource.register` takes, joining the streaming source
(source.py) and the batch and streaming sinks (sink.py), which do not import each other."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .sink import NSQStreamWriter, NSQWriter
from .source import SCHEMA_DDL, NSQStreamReader


class NSQDataSource(DataSource):
    """The ``nsq`` format: a streaming source and a batch/streaming sink.

    Register once per SparkSession: ``spark.dataSource.register(NSQDataSource)``.
    """

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType | str:
        return SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return NSQStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return NSQWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return NSQStreamWriter(self.options, schema, overwrite)

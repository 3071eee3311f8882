"""The `nsq` format itself: what `spark.dataSource.register` takes, joining the streaming source
(source.py) and the batch and streaming sinks (sink.py), which do not import each other.

Strategy: Spark pickles the data source into every task it runs in Python (an executor reading
the source's rows unpickles it next to the reader), so this module imports the source and the
sink only when a method needs one: a reading task loads neither (see reader.py), and neither
does Spark's process that asks for the schema."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


class NSQDataSource(DataSource):
    """The ``nsq`` format: a streaming source and a batch/streaming sink.

    Register once per SparkSession: ``spark.dataSource.register(NSQDataSource)``.
    """

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType | str:
        from .reader import SCHEMA_DDL

        return SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .source import NSQStreamReader

        return NSQStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import NSQWriter

        return NSQWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import NSQStreamWriter

        return NSQStreamWriter(self.options, schema, overwrite)

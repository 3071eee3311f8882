"""Spark connector for NSQ: the `nsq` format (streaming source, batch and streaming sink) on
Spark 4's Python Data Source API, with its nsqd connections on nsqpy.client (TLS, snappy/deflate,
AUTH).

Strategy: importing nsqpy.spark costs nothing and needs no pyspark; `NSQDataSource` and
`register` load pyspark on first use, so the publishing client (nsqpy.spark.client) and lookupd
discovery (nsqpy.spark.lookup) work without it.

    from nsqpy.spark import NSQDataSource
    spark.dataSource.register(NSQDataSource)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .datasource import NSQDataSource

__all__ = ["NSQDataSource", "register"]


def register(spark: Any) -> None:
    """Register the ``nsq`` format on ``spark`` (a SparkSession)."""
    from .datasource import NSQDataSource

    spark.dataSource.register(NSQDataSource)


def __getattr__(name: str) -> Any:
    if name == "NSQDataSource":
        from .datasource import NSQDataSource

        return NSQDataSource
    raise AttributeError(name)

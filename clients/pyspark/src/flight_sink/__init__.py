"""flight-sink Python client: a thin Arrow Flight client and a Spark Structured Streaming sink.

- :class:`flight_sink.Client` speaks the flight-sink wire protocol (``docs/protocol.md``):
  exactly-once epoch writes, plain appends, reads, history, table statistics and maintenance.
- :class:`flight_sink.spark.FlightSink` is a ``foreachBatch`` function that lands every
  micro-batch of a streaming query exactly once, across restarts::

      from flight_sink.spark import FlightSink
      df.writeStream.foreachBatch(FlightSink("grpc://127.0.0.1:8815", table="events")) \\
          .option("checkpointLocation", ckpt).start()

- ``flight_sink.spark.register(spark)`` registers the Spark data source ``flight-sink``
  (:mod:`flight_sink.datasource`: streaming and batch writes and reads), and
  :class:`flight_sink.foreach.FlightSinkForeachWriter` is the ``foreach`` writer for Real-Time
  Mode.

``flight_sink.spark`` imports PySpark only when used, so the plain client needs only pyarrow.
"""

from .client import MODES, Client, CreateSpec, PartitionSpec
from .errors import (
    ERROR_DOMAIN,
    AbortedError,
    AlreadyExistsError,
    CancelledError,
    ClientError,
    DeadlineExceededError,
    EpochNotCommittedError,
    FailedPreconditionError,
    FilterSyntaxError,
    FlightSinkError,
    InvalidArgumentError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    ProtocolError,
    QueryReusedError,
    ResourceExhaustedError,
    SchemaMismatchError,
    ServerInternalError,
    ServerUnavailableError,
    TableNotFoundError,
    UnauthenticatedError,
    UnsupportedError,
)
from .results import (
    Ack,
    CleanupResult,
    CompactResult,
    CreateTableResult,
    DeleteResult,
    DropTableResult,
    EpochStatus,
    FlushMemWALResult,
    FoldMemWALResult,
    HistoryEntry,
    OptimizeIndicesResult,
    PublishIcebergResult,
    TableStats,
    TableVersion,
)
from .retry import RetryPolicy

__version__ = "0.1.0"

#: The flight-sink wire protocol version this client implements.
PROTOCOL_VERSION = 1

__all__ = [
    "ERROR_DOMAIN",
    "MODES",
    "PROTOCOL_VERSION",
    "AbortedError",
    "Ack",
    "AlreadyExistsError",
    "CancelledError",
    "CleanupResult",
    "Client",
    "ClientError",
    "CompactResult",
    "CreateSpec",
    "CreateTableResult",
    "DeadlineExceededError",
    "DeleteResult",
    "DropTableResult",
    "EpochNotCommittedError",
    "EpochStatus",
    "FailedPreconditionError",
    "FilterSyntaxError",
    "FlightSinkError",
    "FlushMemWALResult",
    "FoldMemWALResult",
    "HistoryEntry",
    "InvalidArgumentError",
    "InvalidRequestError",
    "NotFoundError",
    "OptimizeIndicesResult",
    "PartitionSpec",
    "PermissionDeniedError",
    "ProtocolError",
    "PublishIcebergResult",
    "QueryReusedError",
    "ResourceExhaustedError",
    "RetryPolicy",
    "SchemaMismatchError",
    "ServerInternalError",
    "ServerUnavailableError",
    "TableNotFoundError",
    "TableStats",
    "TableVersion",
    "UnauthenticatedError",
    "UnsupportedError",
]

"""A real Real-Time Mode query: Kafka source (a KRaft broker on 127.0.0.1) -> FlightSinkForeachWriter.

Needs PySpark 4.2.0 (Maven Central has spark-sql-kafka-0-10_2.13 4.2.0, not 4.3.0; Spark fetches
it through spark.jars.packages) and the Kafka broker jars, fetched with Maven:

    cat > pom.xml <<'POM'
    <project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
    <groupId>x</groupId><artifactId>kafka-broker</artifactId><version>1</version><dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>3.9.1</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>1.7.36</version></dependency>
    </dependencies></project>
    POM
    mvn -q dependency:copy-dependencies -DoutputDirectory=$PWD/libs
    python3 -m venv venv42 && venv42/bin/pip install pyspark==4.2.0 pyarrow pandas protobuf googleapis-common-protos
    PYSPARK_PYTHON=venv42/bin/python PYTHONPATH=clients/pyspark/src \
        venv42/bin/python clients/pyspark/bench/rtm_kafka.py bin/flight-sink $PWD/libs

It produces 10 rows to topic "events" six times (a Spark batch write to Kafka) and prints, each
time, the seconds from the start of the produce until the last row is readable in flight-sink.
"""
import os, subprocess, sys, tempfile, threading, time, uuid, socket
from pathlib import Path
import pyspark
from pyspark.sql import SparkSession
import flight_sink as fs
import flight_sink.results
from flight_sink.foreach import FlightSinkForeachWriter
from flight_sink.local_server import LocalServer

def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

data = Path(tempfile.mkdtemp(prefix="kraft-"))
p1, p2 = port(), port()
conf = data / "server.properties"
conf.write_text(f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{p2}
listeners=PLAINTEXT://127.0.0.1:{p1},CONTROLLER://127.0.0.1:{p2}
advertised.listeners=PLAINTEXT://127.0.0.1:{p1}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data}/logs
num.partitions=2
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
""")
cp = f"{sys.argv[2]}/*" if len(sys.argv) > 2 else "libs/*"
subprocess.run(["java", "-cp", cp, "kafka.tools.StorageTool", "format", "-t", str(uuid.uuid4()).replace("-", "")[:22], "-c", str(conf)], check=True, capture_output=True)
broker = subprocess.Popen(["java", "-Xmx512m", "-cp", cp, "kafka.Kafka", str(conf)], stdout=open(data / "broker.log", "w"), stderr=subprocess.STDOUT)
srv = LocalServer.start(sys.argv[1], Path(tempfile.mkdtemp()))
boot = f"127.0.0.1:{p1}"
print("pyspark", pyspark.__version__, "broker", boot, "server", srv.uri, flush=True)
spark = (SparkSession.builder.master("local[4]").config("spark.ui.enabled", "false")
         .config("spark.jars.packages", f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}")
         .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
try:
    time.sleep(5)
    def produce(n0, n):
        df = spark.range(n0, n0 + n, numPartitions=1).selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
        df.write.format("kafka").option("kafka.bootstrap.servers", boot).option("topic", "events").save()
    produce(0, 10)
    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", boot).option("subscribe", "events")
              .option("startingOffsets", "earliest").load()
              .selectExpr("CAST(value AS STRING) AS v", "timestamp AS kafka_ts", "partition AS kp", "offset AS ko"))
    w = (events.writeStream.outputMode("update").foreach(FlightSinkForeachWriter(srv.uri, "rtm_events"))
         .option("checkpointLocation", tempfile.mkdtemp()))
    try:
        w = w.trigger(realTime="5 seconds")
    except TypeError as e:
        print("TRIGGER_ERROR", repr(e)); raise
    q = w.start()
    print("started", q.id, flush=True)
    c = fs.Client(srv.uri)
    lat = []
    for i in range(6):
        time.sleep(2)
        t0 = time.time(); produce(1000 + i * 10, 10)
        while True:
            if q.exception() is not None:
                raise q.exception()
            try:
                vs = set(c.read("rtm_events", columns=["v"]).column("v").to_pylist())
            except fs.TableNotFoundError:
                vs = set()
            if str(1000 + i * 10 + 9) in vs:
                lat.append(time.time() - t0); break
            if time.time() - t0 > 60:
                print("TIMEOUT waiting for rows", flush=True); break
            time.sleep(0.05)
    print("latency (produce -> readable in flight-sink), s:", [round(x, 2) for x in lat], flush=True)
    t = c.read("rtm_events"); print("rows", t.num_rows, "distinct", len(set(t.column("v").to_pylist())), [sh.memtable_rows for sh in (c.table_stats("rtm_events").memwal or fs.results.MemWALStats()).shards])
    q.stop()
except Exception as e:
    print("RTM_ERROR", type(e).__name__, str(e)[:3000], flush=True)
finally:
    spark.stop(); srv.stop(); broker.kill()

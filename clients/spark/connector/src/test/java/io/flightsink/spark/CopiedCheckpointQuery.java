package io.flightsink.spark;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;

/**
 * A second Spark application for {@link FlightSinkSparkTest}: one streaming query of the test's
 * JSON files into the sink, from the checkpoint it is given (a copy of the test's own query's).
 * Spark stops a query's older run when a newer one starts in the same application, so two live
 * runs of one query id need two applications, as two clusters would be.
 *
 * <p>Arguments: server URI, table, input directory, checkpoint directory. It prints {@code RUN
 * <runId>} once started, then answers each line {@code sync} on its standard input with {@code
 * SYNCED} once the query has processed every input file (or {@code FAILED <error>}), and exits at
 * the end of its input.
 */
public final class CopiedCheckpointQuery {
  private CopiedCheckpointQuery() {}

  public static void main(String[] args) throws Exception {
    SparkSession spark = SparkSession.builder()
        .master("local[2]")
        .appName("flight-sink-copied-checkpoint")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.schemaInference", "false")
        .getOrCreate();
    spark.sparkContext().setLogLevel("ERROR");
    StreamingQuery q = spark.readStream().schema("id long, k string, v long").option("maxFilesPerTrigger", 1)
        .json(args[2]).repartition(2).writeStream().format("flight-sink")
        .option("uri", args[0]).option("table", args[1]).option("checkpointLocation", args[3])
        .trigger(Trigger.ProcessingTime("50 milliseconds")).start();
    System.out.println("RUN " + q.runId());
    System.out.flush();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      if (!line.equals("sync")) {
        continue;
      }
      try {
        q.processAllAvailable();
        System.out.println("SYNCED");
      } catch (Exception e) {
        System.out.println("FAILED " + String.valueOf(e.getMessage()).replace('\n', ' '));
      }
      System.out.flush();
    }
    q.stop();
    spark.stop();
  }
}

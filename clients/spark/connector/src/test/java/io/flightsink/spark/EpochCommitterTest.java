package io.flightsink.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.util.Map;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/**
 * Commit messages and the driver's checks of them before any call to the server: the options name
 * a port nothing listens on, so a test that reached the server would fail.
 */
class EpochCommitterTest {
  private static final FlightSinkOptions OPTS =
      FlightSinkOptions.parse(Map.of("uri", "grpc://127.0.0.1:1", "table", "t"));

  private static EpochSpec spec(String mode, boolean collect) {
    return new EpochSpec(OPTS, new StructType().add("id", "long"), "q", mode, collect);
  }

  private static JsonNode ack(String status) {
    return FlightSinkClient.JSON.createObjectNode().put("status", status).put("rows", 3);
  }

  @Test
  void theOnlyTasksAcknowledgementIsTheEpochs() {
    FlightSinkCommitMessage m = new FlightSinkCommitMessage(0, 1, "committed", null, 3, null, ack("committed"));
    JsonNode got = EpochCommitter.commit(spec("append", false), "q", 4, new WriterCommitMessage[] {m});
    assertEquals("committed", got.path("status").asText());
    FlightSinkCommitMessage dup = new FlightSinkCommitMessage(0, 0, "duplicate", null, 3, null, ack("duplicate"));
    assertEquals("duplicate",
        EpochCommitter.commit(spec("update", true), "q", 4, new WriterCommitMessage[] {dup}).path("status").asText(),
        "a replayed epoch is success");
  }

  @Test
  void anAcknowledgementOtherThanCommittedFails() {
    FlightSinkCommitMessage m = new FlightSinkCommitMessage(0, 0, "committed", null, 3, null, ack("conflict"));
    FlightSinkException e = assertThrows(FlightSinkException.class,
        () -> EpochCommitter.commit(spec("append", false), "q", 4, new WriterCommitMessage[] {m}));
    assertTrue(e.getMessage().contains("epoch 4 of q was not committed to t"), e.getMessage());
  }

  @Test
  void aMissingMessageFailsTheEpoch() {
    WriterCommitMessage foreign = new WriterCommitMessage() {};
    FlightSinkException e = assertThrows(FlightSinkException.class,
        () -> EpochCommitter.commit(spec("append", false), "q", 2, new WriterCommitMessage[] {foreign}));
    assertTrue(e.getMessage().contains("a write task left no commit message"), e.getMessage());
  }

  @Test
  void twoStagesOfOnePartitionFailTheEpoch() {
    WriterCommitMessage[] ms = {
        new FlightSinkCommitMessage(1, 0, "staged", "stage-a", 5, null, null),
        new FlightSinkCommitMessage(1, 1, "staged", "stage-b", 5, null, null)};
    FlightSinkException e = assertThrows(FlightSinkException.class,
        () -> EpochCommitter.commit(spec("append", false), "q", 2, ms));
    assertTrue(e.getMessage().contains("two stages for partition 1"), e.getMessage());
  }

  @Test
  void anEmptyCollectedEpochCommitsNothing() {
    WriterCommitMessage[] ms = {
        new FlightSinkCommitMessage(0, 0, "empty", null, 0, null, null),
        new FlightSinkCommitMessage(1, 0, "collected", null, 0, new byte[0], null)};
    assertEquals("empty", EpochCommitter.commit(spec("update", true), "q", 2, ms).path("status").asText());
  }

  @Test
  void messagesTravelFromTheTasks() throws Exception {
    FlightSinkCommitMessage m = new FlightSinkCommitMessage(3, 2, "committed", "s", 9, new byte[] {1, 2},
        ack("committed"));
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
      out.writeObject(m);
    }
    FlightSinkCommitMessage back;
    try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
      back = (FlightSinkCommitMessage) in.readObject();
    }
    assertEquals(m.toString(), back.toString());
    assertEquals("FlightSinkCommitMessage(partition=3, attempt=2, status=committed, stage=s, rows=9)", back.toString());
    assertEquals(2, back.ipc.length);
    assertEquals(m.ack, back.ack);
  }
}

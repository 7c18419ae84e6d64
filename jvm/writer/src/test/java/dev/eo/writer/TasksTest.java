package dev.eo.writer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

class TasksTest {
  private static final String PREFIX = "eo1:orders-7:q1a2:s0:12:345:";

  @Test
  void aTasksGidIsThePrefixItsPartitionAndItsAttempt() {
    assertEquals("eo1:orders-7:q1a2:s0:12:345:3:9876", Tasks.gid(PREFIX, 3, 9876L));
  }

  @Test
  void aGidLongerThanPostgresqlKeepsIsRefused() {
    // PostgreSQL's GIDSIZE is 200 bytes with the terminating NUL: 199 characters at most.
    String fits = "eo1:" + "a".repeat(199 - "eo1:".length() - "0:1".length());
    assertEquals(199, Tasks.gid(fits, 0, 1L).length());
    assertThrows(IllegalArgumentException.class, () -> Tasks.gid(fits + "a", 0, 1L));
  }

  @Test
  void aTasksLineIsItsGidRowsAndDeadLettersTabSeparated() {
    assertEquals("eo1:p:q:s:1:2:0:3\t200\t1", Tasks.line("eo1:p:q:s:1:2:0:3", 200, 1));
  }

  @Test
  void onlyTheFirstTaskRunsTheArmedFaultAndOnlyItsFirstAttemptRaises() throws Exception {
    Spec spec = new Spec();
    spec.fault = "raise";
    spec.batchId = 4;
    Tasks.afterPrepared(spec, 1, 0);
    Tasks.afterPrepared(spec, 0, 1);
    assertThrows(RuntimeException.class, () -> Tasks.afterPrepared(spec, 0, 0));
    spec.fault = null;
    Tasks.afterPrepared(spec, 0, 0);
  }
}

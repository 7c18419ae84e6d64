package dev.eo.writer.postgres;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.eo.writer.Tasks;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class TaskWriterTest {
  private static final String PREFIX = "eo1:orders-7:q1a2:s0:12:345:";

  @Test
  void thePreparedTransactionIsNamedByTheGidAsAStringLiteral() {
    String gid = Tasks.gid(PREFIX, 0, 1L);
    assertEquals(
        "PREPARE TRANSACTION 'eo1:orders-7:q1a2:s0:12:345:0:1'", TaskWriter.prepareTransaction(gid));
  }

  /** Nothing that could end the literal or stand outside a gid's alphabet reaches the SQL. */
  @ParameterizedTest
  @ValueSource(
      strings = {
        "eo1:x'; COMMIT PREPARED 'y:",
        "eo1:Orders:",
        "eo1:a b:",
        "eo1:a\\:",
        "eo1:a\n:",
        "eo1:é:",
      })
  void aGidOutsideTheAlphabetIsRefused(String prefix) {
    assertThrows(IllegalArgumentException.class, () -> Tasks.gid(prefix, 0, 1L));
    assertThrows(
        IllegalArgumentException.class, () -> TaskWriter.prepareTransaction(prefix + "0:1"));
  }

  @Test
  void deadLettersAreEscapedForCopyText() {
    assertEquals("a\\\\b\\tc\\nd\\re", TaskWriter.escape("a\\b\tc\nd\re"));
    assertEquals("plain é", TaskWriter.escape("plain é"));
    assertEquals("x\\u0000y", TaskWriter.storable("x\u0000y"));
    // Escaped after storable: the backslash it writes is escaped too, as COPY text needs.
    assertEquals("x\\\\u0000y", TaskWriter.escape(TaskWriter.storable("x\u0000y")));
  }
}

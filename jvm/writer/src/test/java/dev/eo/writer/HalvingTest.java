package dev.eo.writer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

class HalvingTest {
  private static final Halving.Refusal REFUSAL = e -> "23000".equals(e.getSQLState());

  @Test
  void aWholeRefusedAlreadyIsNotSentAgainAndItsRefusedRowsAreFoundInInputOrder()
      throws SQLException {
    Set<Integer> bad = Set.of(1, 4);
    List<String> sent = new ArrayList<>();
    List<Integer> refused = new ArrayList<>();
    long written =
        Halving.isolate(
            5,
            new SQLException("whole", "23000"),
            (lo, hi) -> {
              sent.add(lo + ".." + hi);
              for (int i = lo; i < hi; i++) {
                if (bad.contains(i)) throw new SQLException("row " + i, "23000");
              }
              return hi - lo;
            },
            (index, e) -> refused.add(index),
            REFUSAL,
            Halving.NONE);
    assertEquals(3, written);
    assertEquals(List.of(1, 4), refused);
    assertEquals(
        List.of("0..2", "0..1", "1..2", "2..5", "2..3", "3..5", "3..4", "4..5"), sent);
  }

  @Test
  void aSingleRowRefusedAlreadyIsRefusedWithTheErrorGiven() throws SQLException {
    SQLException first = new SQLException("whole", "23000");
    List<SQLException> refused = new ArrayList<>();
    long written =
        Halving.isolate(
            1,
            first,
            (lo, hi) -> {
              throw new AssertionError("not sent again");
            },
            (index, e) -> refused.add(e),
            REFUSAL,
            Halving.NONE);
    assertEquals(0, written);
    assertEquals(List.of(first), refused);
  }

  @Test
  void anErrorThatIsNoRefusalStops() {
    SQLException lost = new SQLException("gone", "08006");
    SQLException thrown =
        assertThrows(
            SQLException.class,
            () ->
                Halving.isolate(
                    4,
                    new SQLException("whole", "23000"),
                    (lo, hi) -> {
                      throw lost;
                    },
                    (index, e) -> {},
                    REFUSAL,
                    Halving.NONE));
    assertSame(lost, thrown);
  }
}

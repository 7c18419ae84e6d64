package dev.eo.writer;

import java.sql.SQLException;
import java.util.ArrayDeque;
import java.util.Deque;

/**
 * Rows a table refuses, found as both Python writers find them ({@code
 * sinks.postgres.refusals}, {@code sinks.mysql.refusals}): once a write of rows {@code [0, n)}
 * was refused, they are written again in halves, first half first, a refused piece halved
 * again until each refused row stands alone. A batch without a refused row pays nothing.
 *
 * <p>What a refused piece leaves behind is the database's: PostgreSQL rolls back to a
 * savepoint taken before each piece ({@link Guard}); a MySQL statement the table refuses
 * wrote none of its rows, so its guard does nothing.
 */
public final class Halving {
  private Halving() {}

  /** Writes rows {@code [lo, hi)}; the rows written (an upsert: merged). */
  public interface Piece {
    long write(int lo, int hi) throws SQLException;
  }

  /** Takes refused row {@code index} with the database's error (or throws to fail the task). */
  public interface Refuse {
    void take(int index, SQLException e) throws SQLException;
  }

  /** Whether an error is the table refusing a value or a row (else it fails the task). */
  public interface Refusal {
    boolean test(SQLException e);
  }

  /** What surrounds each piece: taken before it, undone after a refusal, kept after success. */
  public interface Guard {
    void before() throws SQLException;

    void undo() throws SQLException;

    void keep() throws SQLException;
  }

  /** A guard that does nothing (a refused MySQL statement wrote nothing). */
  public static final Guard NONE =
      new Guard() {
        @Override
        public void before() {}

        @Override
        public void undo() {}

        @Override
        public void keep() {}
      };

  /**
   * Rows {@code [0, rows)}, refused as a whole already with {@code first}: its halves, in input
   * order; rows written. A single row refused as a whole is refused at once, with {@code
   * first}; when {@code first} is null (the whole was rolled back with its transaction), it is
   * written again alone.
   */
  public static long isolate(
      int rows, SQLException first, Piece piece, Refuse refuse, Refusal refusal, Guard guard)
      throws SQLException {
    long count = 0;
    Deque<int[]> pending = new ArrayDeque<>();
    if (rows > 1) {
      pending.push(new int[] {rows / 2, rows});
      pending.push(new int[] {0, rows / 2});
    } else if (first != null) {
      refuse.take(0, first);
      return 0;
    } else {
      pending.push(new int[] {0, rows});
    }
    while (!pending.isEmpty()) {
      int[] range = pending.pop();
      int lo = range[0];
      int hi = range[1];
      if (lo >= hi) continue;
      guard.before();
      long written;
      try {
        written = piece.write(lo, hi);
      } catch (SQLException e) {
        if (!refusal.test(e)) throw e;
        guard.undo();
        if (hi - lo == 1) {
          refuse.take(lo, e);
        } else {
          int middle = (lo + hi) / 2;
          pending.push(new int[] {middle, hi});
          pending.push(new int[] {lo, middle});
        }
        continue;
      }
      guard.keep();
      count += written;
    }
    return count;
  }
}

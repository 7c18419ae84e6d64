package dev.eo.writer.mysql;

import dev.eo.writer.Halving;
import dev.eo.writer.Spec;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;

/**
 * One writer task's statements against its MySQL/MariaDB connection, in the Python writer's
 * order ({@code MySqlWriter._branch}, {@code MySqlKind.run_task}):
 *
 * <ol>
 *   <li>the session's settings ({@code SESSION_SQL}: strict {@code sql_mode}, {@code time_zone
 *       '+00:00'}, the lock and idle timeouts);
 *   <li>the dead-letter table made if it is missing, before the branch (DDL inside a branch is
 *       refused);
 *   <li>{@code XA START xid} (or {@code BEGIN} at least once);
 *   <li>the rows, as multi-row {@code INSERT}s of at most {@code chunkRows} rows and {@code
 *       statementChars} characters; an upsert's one row per key (the version rule, {@code
 *       upsert.winners}) ending in {@code ON DUPLICATE KEY UPDATE};
 *   <li>the dead letters (the batch's own, then rows the table refused);
 *   <li>the marker row, {@code XA END}, {@code XA PREPARE} (or {@code COMMIT}).
 * </ol>
 *
 * On any error it runs {@code XA END} and {@code XA ROLLBACK} (or {@code ROLLBACK}) itself, as a
 * failed statement does not fail its branch, and throws. A statement the table refuses wrote
 * none of its rows and leaves the branch going, so its rows are written again in halves ({@link
 * Halving}); each refused row becomes a dead letter in the branch, or fails the task naming the
 * batch ({@code onRefusedRecord: fail}). The caller closes the connection right after: MariaDB
 * binds a prepared branch to the connection that prepared it until it ends.
 */
public final class Branch {
  /** The connection, as the statements need it (a JDBC one in a task, a recording one in tests). */
  public interface Server {
    void execute(String sql) throws SQLException;

    /** Whether the query returns a row. */
    boolean anyRow(String sql) throws SQLException;
  }

  private final Spec spec;
  private final Spec.MySql my;
  private final Literals literals;
  private final Server server;
  /** Dead letters of the branch: (raw, reason). */
  private final List<String[]> letters = new ArrayList<>();

  public Branch(Spec spec, Literals literals, Server server) {
    this.spec = spec;
    this.my = spec.mysql;
    this.literals = literals;
    this.server = server;
  }

  /** Writes the task's rows in one branch of xid {@code xid} (prepared under {@code gid}), or
   * one committed transaction; {@code {rows taken, dead letters}}. */
  public long[] write(String gid, String xid, Iterator<InternalRow> rows) throws SQLException {
    server.execute(format(my.sessionSql, my.sqlMode, my.lockWaitTimeoutSeconds,
        my.sessionWaitTimeoutSeconds));
    if (my.deadLetterTable != null && !server.anyRow(my.deadLetterExistsSql)) {
      server.execute(my.deadLetterDdl);
    }
    server.execute(spec.twoPhase ? "XA START " + xid : "BEGIN");
    long count;
    try {
      count = my.keyIndexes.isEmpty() ? append(rows) : upsert(rows);
      writeLetters();
      if (spec.twoPhase) {
        server.execute(format(my.markerSql, gid, spec.pipeline, spec.batchId, count));
        server.execute("XA END " + xid);
        server.execute("XA PREPARE " + xid);
      } else {
        server.execute("COMMIT");
      }
    } catch (SQLException | RuntimeException | Error e) {
      for (String undo : spec.twoPhase
          ? new String[] {"XA END " + xid, "XA ROLLBACK " + xid}
          : new String[] {"ROLLBACK"}) {
        try {
          server.execute(undo);
        } catch (SQLException ignored) {
          // As the Python writer: the branch may be ended already, or the connection gone.
        }
      }
      throw e;
    }
    return new long[] {count, letters.size()};
  }

  /** {@code sql} with each {@code %s} replaced by the next value's literal, as PyMySQL does. */
  static String format(String sql, Object... values) {
    StringBuilder out = new StringBuilder(sql.length() + 64);
    int from = 0;
    for (Object value : values) {
      int at = sql.indexOf("%s", from);
      if (at < 0) throw new IllegalArgumentException("fewer %s than values in " + sql);
      out.append(sql, from, at);
      if (value instanceof String text) {
        Literals.string(out, text);
      } else if (value instanceof Long || value instanceof Integer) {
        out.append(value);
      } else {
        throw new IllegalArgumentException("no literal for " + value);
      }
      from = at + 2;
    }
    if (sql.indexOf("%s", from) >= 0) {
      throw new IllegalArgumentException("more %s than values in " + sql);
    }
    return out.append(sql, from, sql.length()).toString();
  }

  /** Whether {@code row} is one of the batch's dead letters (kept if this sink writes them). */
  private boolean deadLetter(InternalRow row) {
    if (spec.reasonIndex < 0 || row.isNullAt(spec.reasonIndex)) return false;
    if (my.batchDeadLetters) {
      letters.add(new String[] {storable(text(row, spec.rawIndex)), storable(text(row,
          spec.reasonIndex))});
    }
    return true;
  }

  private static String text(InternalRow row, int index) {
    return index < 0 || row.isNullAt(index) ? "" : row.getUTF8String(index).toString();
  }

  /** {@code storable_text}: NUL spelled {@code \u0000}, as the Python path keeps a batch's
   * dead letters whatever the sink. */
  static String storable(String text) {
    return text.replace("\u0000", "\\u0000");
  }

  /** A refused row: a dead letter, or the task's failure. */
  private void refuse(InternalRow row, Refusal refusal) {
    if (!my.refusedToDeadLetters) {
      throw new IllegalStateException(refusal.failure(spec.tableName, spec.batchId));
    }
    letters.add(new String[] {literals.json(row), refusal.reason(spec.tableName)});
  }

  /** The rows being gathered into one statement: their literals, back to back, and the rows. */
  private final class Statement {
    final StringBuilder text = new StringBuilder(1 << 16);
    final List<Integer> ends = new ArrayList<>();
    final List<InternalRow> held = new ArrayList<>();
    private final StringBuilder scratch = new StringBuilder(256);

    /** Adds one row (flushing first when it would not fit); rows taken by flushes. */
    long add(InternalRow row) throws SQLException {
      scratch.setLength(0);
      try {
        literals.row(scratch, row);
      } catch (Literals.Unsendable e) {
        refuse(row, Refusal.unsendable(e.column, e.words));
        return 0;
      }
      long count = 0;
      // As the Python writer counts: the prefix and suffix, and each literal with one comma.
      int size =
          my.insertPrefix.length() + my.insertSuffix.length() + text.length()
              + (held.isEmpty() ? 0 : 1);
      if (!held.isEmpty()
          && (held.size() >= my.chunkRows || size + scratch.length() + 1 > my.statementChars)) {
        count = flush();
      }
      if (!held.isEmpty()) text.append(',');
      text.append(scratch);
      ends.add(text.length());
      held.add(row.copy());
      return count;
    }

    /** Runs the statement of the held rows; a refused one again in halves; rows taken. */
    long flush() throws SQLException {
      if (held.isEmpty()) return 0;
      long count;
      try {
        server.execute(my.insertPrefix + text + my.insertSuffix);
        count = held.size();
      } catch (SQLException e) {
        if (!Refusal.isRefusal(e, my.refusalCodes)) throw e;
        count =
            Halving.isolate(
                held.size(),
                e,
                (lo, hi) -> {
                  int start = lo == 0 ? 0 : ends.get(lo - 1) + 1;
                  server.execute(
                      my.insertPrefix + text.substring(start, ends.get(hi - 1)) + my.insertSuffix);
                  return hi - lo;
                },
                (index, refused) -> refuse(held.get(index), Refusal.of(refused, my.refusalCodes)),
                refused -> Refusal.isRefusal(refused, my.refusalCodes),
                Halving.NONE);
      }
      text.setLength(0);
      ends.clear();
      held.clear();
      return count;
    }
  }

  /** An append: every row that is not a dead letter, in input order; rows taken. */
  private long append(Iterator<InternalRow> rows) throws SQLException {
    Statement statement = new Statement();
    long count = 0;
    while (rows.hasNext()) {
      InternalRow row = rows.next();
      if (deadLetter(row)) continue;
      count += statement.add(row);
    }
    return count + statement.flush();
  }

  /**
   * An upsert: one row per key, the winner by the version rule ({@code upsert.winners}: the
   * highest version wins, a NULL version is older than any value, the later row wins a tie or
   * when there is no version column), in the order keys first appear; rows taken (one per key
   * the table took, whether its guard let it replace the stored row or not).
   */
  private long upsert(Iterator<InternalRow> rows) throws SQLException {
    Map<String, InternalRow> kept = new LinkedHashMap<>();
    StringBuilder key = new StringBuilder(64);
    while (rows.hasNext()) {
      InternalRow row = rows.next();
      if (deadLetter(row)) continue;
      key.setLength(0);
      for (int k : my.keyIndexes) {
        literals.value(key, row, k);
        key.append(',');
      }
      String name = key.toString();
      InternalRow held = kept.get(name);
      if (held == null || my.versionIndex < 0
          || Versions.incomingWins(literals, held, row, my.versionIndex)) {
        kept.put(name, row.copy());
      }
    }
    Statement statement = new Statement();
    long count = 0;
    for (InternalRow row : kept.values()) {
      count += statement.add(row);
    }
    return count + statement.flush();
  }

  /** The branch's dead letters, in statements of at most {@code statementChars} characters. */
  private void writeLetters() throws SQLException {
    if (letters.isEmpty()) return;
    if (my.deadLetterTable == null) {
      throw new IllegalStateException("dead letters for " + spec.tableName
          + " but the writer has no dead-letter table");
    }
    StringBuilder text = new StringBuilder(my.deadLetterInsertPrefix);
    int rows = 0;
    StringBuilder one = new StringBuilder(256);
    for (String[] letter : letters) {
      one.setLength(0);
      one.append('(');
      Literals.string(one, spec.pipeline);
      one.append(',').append(spec.batchId).append(',');
      Literals.string(one, letter[0]);
      one.append(',');
      Literals.string(one, letter[1]);
      one.append(')');
      if (rows > 0 && text.length() + one.length() + 1 > my.statementChars) {
        server.execute(text.toString());
        text.setLength(my.deadLetterInsertPrefix.length());
        rows = 0;
      }
      if (rows > 0) text.append(',');
      text.append(one);
      rows++;
    }
    server.execute(text.toString());
  }
}

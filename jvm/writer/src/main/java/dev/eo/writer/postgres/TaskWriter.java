package dev.eo.writer.postgres;

import dev.eo.writer.Halving;
import dev.eo.writer.Kind;
import dev.eo.writer.Spec;
import dev.eo.writer.Tasks;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DecimalType;
import org.postgresql.PGConnection;
import org.postgresql.copy.CopyIn;
import org.postgresql.copy.CopyManager;

/**
 * One writer task: its partition's rows in one transaction, prepared under its gid (or
 * committed), the same steps as the Python writer task ({@code eo_jobs.runtime.task}):
 * TimeZone UTC and lock_timeout for the transaction, the rows by COPY, the dead letters by
 * COPY into the dead-letter table, the participant's marker, PREPARE TRANSACTION. A write the
 * table refuses (SQLSTATE class 22 or 23) either fails naming the batch ({@code
 * onRefusedRecord: fail}) or is written again in pieces ({@link Refusals}), its refused rows
 * becoming dead letters in the same transaction.
 */
public final class TaskWriter implements Function2<Integer, Iterator<InternalRow>, Iterator<String>> {
  private static final long serialVersionUID = 1L;
  private static final int FLUSH_BYTES = 1 << 20;

  private final Spec spec;
  private final Kind[] kinds;
  private final DecimalType[] decimals;

  public TaskWriter(Spec spec, Kind[] kinds, DecimalType[] decimals) {
    this.spec = spec;
    this.kinds = kinds;
    this.decimals = decimals;
  }

  @Override
  public Iterator<String> call(Integer partition, Iterator<InternalRow> rows) throws Exception {
    TaskContext context = TaskContext.get();
    String gid = Tasks.gid(spec.gidPrefix, partition, context.taskAttemptId());
    long count;
    int dead;
    try (Connection conn = Connections.open(spec)) {
      conn.setAutoCommit(false);
      begin(conn);
      checkTypes(conn);
      CopyManager copy = conn.unwrap(PGConnection.class).getCopyAPI();
      List<String[]> deadLetters = new ArrayList<>();
      List<String[]> refused = new ArrayList<>();
      try (Refusals.Kept kept =
          spec.refusedSql == null ? null : new Refusals.Kept(spec.keptMemoryBytes)) {
        try {
          if (spec.stageSql == null) {
            count = copyRows(conn, copy, spec.copySql, rows, deadLetters, kept);
          } else {
            count = upsert(conn, copy, rows, deadLetters, kept);
          }
        } catch (SQLException e) {
          if (!Refusals.isRefusal(e)) throw e;
          if (kept == null) {
            throw new IllegalStateException(
                "batch " + spec.batchId + ": " + spec.tableName
                    + " refused a record (onRefusedRecord: fail): " + Refusals.words(e), e);
          }
          count = isolating(conn, copy, kept, refused);
        }
      }
      if (!deadLetters.isEmpty()) {
        copyDeadLetters(copy, spec.deadLetterSql, deadLetters);
      }
      if (!refused.isEmpty()) {
        ensureRefusedTable(conn);
        copyDeadLetters(copy, spec.refusedSql, refused);
      }
      dead = deadLetters.size() + refused.size();
      if (spec.twoPhase) {
        try (PreparedStatement marker = conn.prepareStatement(spec.markerSql)) {
          marker.setString(1, gid);
          marker.setString(2, spec.pipeline);
          marker.setLong(3, spec.batchId);
          marker.setLong(4, count);
          marker.execute();
        }
        try (Statement prepare = conn.createStatement()) {
          prepare.execute(prepareTransaction(gid));
        }
      } else {
        conn.commit();
      }
    }
    Tasks.afterPrepared(spec, partition, context.attemptNumber());
    return List.of(Tasks.line(gid, count, dead)).iterator();
  }

  /** {@code PREPARE TRANSACTION 'gid'}: a gid is a string literal, of checked characters only. */
  static String prepareTransaction(String gid) {
    return "PREPARE TRANSACTION '" + Tasks.checked(gid) + "'";
  }

  /** A call to the server that returns a row count. */
  private interface Counted {
    long run() throws SQLException;
  }

  /**
   * {@code call} without the socket timeout: the statements whose time grows with the rows
   * (the end of a COPY, which waits for the rows' triggers and foreign-key checks; an upsert's
   * merge, which sorts the stage and probes the index per row) may take longer than any
   * fixed bound, and a timeout would fail them on every attempt and replay alike. The timeout
   * stays for everything else, where only a lost server is that quiet.
   */
  private static long unbounded(Connection conn, Counted call) throws SQLException {
    int before = conn.getNetworkTimeout();
    conn.setNetworkTimeout(Runnable::run, 0);
    try {
      return call.run();
    } finally {
      conn.setNetworkTimeout(Runnable::run, before);
    }
  }

  /** The transaction's settings ({@code SESSION_SQL}), first in every writer transaction. */
  private void begin(Connection conn) throws SQLException {
    try (PreparedStatement set = conn.prepareStatement(spec.sessionSql)) {
      set.setString(1, Integer.toString(spec.lockTimeoutMs));
      set.execute();
    }
  }

  /**
   * The slow path ({@link Refusals}): the transaction again (nothing precedes the rows in it),
   * the kept rows in pieces under savepoints; refused rows into {@code refused} as
   * (raw JSON, reason); rows written. An upsert keeps one staging table for every piece:
   * copied into, merged, emptied.
   */
  private long isolating(
      Connection conn, CopyManager copy, Refusals.Kept kept, List<String[]> refused)
      throws SQLException {
    conn.rollback();
    begin(conn);
    String stage = UUID.randomUUID().toString().replace("-", "");
    try (Statement statement = conn.createStatement()) {
      if (spec.stageSql != null) {
        statement.execute(spec.stageSql.replace(Spec.STAGE, stage));
      }
      String copySql = spec.copySql.replace(Spec.STAGE, stage);
      Halving.Piece piece =
          (lo, hi) -> {
            byte[] payload = kept.piece(lo, hi);
            CopyIn in = copy.copyIn(copySql);
            try {
              in.writeToCopy(payload, 0, payload.length);
              long written = unbounded(conn, in::endCopy);
              if (spec.stageSql == null) return written;
              String merge = spec.mergeSql.replace(Spec.STAGE, stage);
              long merged = unbounded(conn, () -> statement.executeLargeUpdate(merge));
              statement.execute(spec.clearSql.replace(Spec.STAGE, stage));
              return merged;
            } finally {
              if (in.isActive()) in.cancelCopy();
            }
          };
      Halving.Refuse refuse =
          (index, e) ->
              refused.add(
                  new String[] {
                    kept.json(index, spec.columns, kinds),
                    spec.tableName + " refused the record: " + Refusals.words(e)
                  });
      long count = Refusals.isolate(conn, kept.rows().size(), piece, refuse);
      if (spec.stageSql != null) {
        statement.execute(spec.dropSql.replace(Spec.STAGE, stage));
      }
      return count;
    }
  }

  /**
   * The dead-letter table of this sink's database, made (in a transaction of its own, so
   * that two tasks never wait on each other's prepared one) when {@code to_regclass} does not
   * find it.
   */
  private void ensureRefusedTable(Connection conn) throws SQLException {
    try (PreparedStatement find = conn.prepareStatement("SELECT to_regclass(?)")) {
      find.setString(1, spec.refusedTable);
      try (ResultSet rs = find.executeQuery()) {
        if (rs.next() && rs.getString(1) != null) return;
      }
    }
    try (Connection other = Connections.open(spec); Statement create = other.createStatement()) {
      other.setAutoCommit(true);
      create.execute(spec.refusedCreateSql);
    } catch (SQLException e) {
      String state = e.getSQLState();
      if (!"42P07".equals(state) && !"23505".equals(state)) throw e; // made by another task
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new SQLException("interrupted while connecting", e);
    }
  }

  /** The target's column types must still be the ones the driver chose binary COPY for. */
  private void checkTypes(Connection conn) throws SQLException {
    Map<String, String> found = new HashMap<>();
    try (PreparedStatement query = conn.prepareStatement(spec.typesSql)) {
      query.setString(1, spec.table);
      try (ResultSet rs = query.executeQuery()) {
        while (rs.next()) {
          found.put(rs.getString(1), rs.getString(2));
        }
      }
    }
    for (int i = 0; i < spec.columns.size(); i++) {
      String column = spec.columns.get(i);
      String type = found.get(column);
      if (type == null) {
        throw new IllegalStateException(
            "column " + column + " of " + spec.table + " is gone (the table changed after the"
                + " driver chose its writer); restart the pipeline");
      }
      if (!kinds[i].accepts(type)) {
        throw new IllegalStateException(
            "column " + column + " of " + spec.table + " is of type " + type
                + " now, which binary COPY of a " + kinds[i] + " value cannot fill (the"
                + " table changed after the driver chose its writer); restart the pipeline");
      }
    }
  }

  /**
   * An upsert: the rows into a staging table of this task's own, merged into the target with
   * one statement, the stage dropped, as {@code PostgresWriter._upsert} does; rows merged.
   */
  private long upsert(
      Connection conn,
      CopyManager copy,
      Iterator<InternalRow> rows,
      List<String[]> deadLetters,
      Refusals.Kept kept)
      throws SQLException {
    String stage = UUID.randomUUID().toString().replace("-", "");
    try (Statement statement = conn.createStatement()) {
      statement.execute(spec.stageSql.replace(Spec.STAGE, stage));
      copyRows(conn, copy, spec.copySql.replace(Spec.STAGE, stage), rows, deadLetters, kept);
      String merge = spec.mergeSql.replace(Spec.STAGE, stage);
      long merged = unbounded(conn, () -> statement.executeLargeUpdate(merge));
      statement.execute(spec.dropSql.replace(Spec.STAGE, stage));
      return merged;
    }
  }

  /**
   * The rows by binary COPY; rows copied. With {@code kept}, every flushed segment is kept
   * (a new buffer per flush while it holds them in memory) for {@link #isolating}, and a refused COPY
   * still reads the rest of the rows (and their dead letters) before it throws.
   */
  private long copyRows(
      Connection conn,
      CopyManager copy,
      String copySql,
      Iterator<InternalRow> rows,
      List<String[]> deadLetters,
      Refusals.Kept kept)
      throws SQLException {
    BinaryRows out = new BinaryRows(FLUSH_BYTES + (FLUSH_BYTES >> 2));
    CopyIn in = copy.copyIn(copySql);
    long count = 0;
    SQLException failed = null;
    try {
      out.header();
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        if (spec.reasonIndex >= 0 && !row.isNullAt(spec.reasonIndex)) {
          if (spec.deadLetterSql != null) {
            deadLetters.add(new String[] {text(row, spec.rawIndex), text(row, spec.reasonIndex)});
          }
          continue;
        }
        out.row(row, kinds, decimals);
        count++;
        if (out.length >= FLUSH_BYTES) {
          if (failed == null) {
            try {
              in.writeToCopy(out.bytes, 0, out.length);
            } catch (SQLException e) {
              if (kept == null) throw e;
              failed = e;
            }
          }
          if (kept != null && kept.keep(out.bytes, out.length)) {
            out = new BinaryRows(FLUSH_BYTES + (FLUSH_BYTES >> 2));
          } else {
            out.length = 0;
          }
        }
      }
      out.trailer();
      if (kept != null) kept.keep(out.bytes, out.length);
      if (failed != null) throw failed;
      in.writeToCopy(out.bytes, 0, out.length);
      unbounded(conn, in::endCopy);
    } finally {
      if (in.isActive()) {
        in.cancelCopy();
      }
    }
    return count;
  }

  private static String text(InternalRow row, int index) {
    return index < 0 || row.isNullAt(index) ? "" : row.getUTF8String(index).toString();
  }

  /** The dead letters in COPY's text format: (pipeline, batch_id, raw, reason). */
  private void copyDeadLetters(CopyManager copy, String copySql, List<String[]> deadLetters)
      throws SQLException, IOException {
    StringBuilder text = new StringBuilder();
    String prefix = escape(spec.pipeline) + "\t" + spec.batchId + "\t";
    for (String[] letter : deadLetters) {
      text.append(prefix).append(escape(storable(letter[0]))).append('\t');
      text.append(escape(storable(letter[1]))).append('\n');
    }
    byte[] bytes = text.toString().getBytes(StandardCharsets.UTF_8);
    copy.copyIn(copySql, new java.io.ByteArrayInputStream(bytes));
  }

  /** Text PostgreSQL accepts: NUL spelled {@code \u0000}, as {@code storable_text} does. */
  static String storable(String value) {
    return value.replace("\u0000", "\\u0000");
  }

  /** A value in COPY's text format: backslash, tab, newline and carriage return escaped. */
  static String escape(String value) {
    StringBuilder out = new StringBuilder(value.length() + 8);
    for (int i = 0; i < value.length(); i++) {
      char c = value.charAt(i);
      switch (c) {
        case '\\' -> out.append("\\\\");
        case '\t' -> out.append("\\t");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        default -> out.append(c);
      }
    }
    return out.toString();
  }
}

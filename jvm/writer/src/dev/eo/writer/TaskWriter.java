package dev.eo.writer;

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
import java.util.regex.Pattern;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.catalyst.InternalRow;
import org.postgresql.PGConnection;
import org.postgresql.copy.CopyIn;
import org.postgresql.copy.CopyManager;

/**
 * One writer task: its partition's rows in one transaction, prepared under its gid (or
 * committed), the same steps as the Python writer task ({@code eo_jobs.runtime.task}):
 * TimeZone UTC and lock_timeout for the transaction, the rows by COPY, the dead letters by
 * COPY into the dead-letter table, the participant's marker, PREPARE TRANSACTION.
 */
final class TaskWriter implements Function2<Integer, Iterator<InternalRow>, Iterator<String>> {
  private static final long serialVersionUID = 1L;
  private static final int FLUSH_BYTES = 1 << 20;
  private static final Pattern GID = Pattern.compile("[a-z0-9:-]{1,199}");

  private final Spec spec;
  private final Kind[] kinds;

  TaskWriter(Spec spec, Kind[] kinds) {
    this.spec = spec;
    this.kinds = kinds;
  }

  @Override
  public Iterator<String> call(Integer partition, Iterator<InternalRow> rows) throws Exception {
    TaskContext context = TaskContext.get();
    String gid = spec.gidPrefix + partition + ":" + context.taskAttemptId();
    if (!GID.matcher(gid).matches()) {
      throw new IllegalArgumentException("not a gid: " + gid);
    }
    long count;
    int dead;
    try (Connection conn = Connections.open(spec)) {
      conn.setAutoCommit(false);
      try (PreparedStatement set = conn.prepareStatement(spec.sessionSql)) {
        set.setString(1, Integer.toString(spec.lockTimeoutMs));
        set.execute();
      }
      checkTypes(conn);
      CopyManager copy = conn.unwrap(PGConnection.class).getCopyAPI();
      List<String[]> deadLetters = new ArrayList<>();
      if (spec.stageSql == null) {
        count = copyRows(copy, spec.copySql, rows, deadLetters);
      } else {
        count = upsert(conn, copy, rows, deadLetters);
      }
      dead = deadLetters.size();
      if (dead > 0) {
        copyDeadLetters(copy, deadLetters);
      }
      if (spec.twoPhase) {
        try (PreparedStatement marker = conn.prepareStatement(spec.markerSql)) {
          marker.setString(1, gid);
          marker.setString(2, spec.pipeline);
          marker.setLong(3, spec.batchId);
          marker.setLong(4, count);
          marker.execute();
        }
        try (Statement prepare = conn.createStatement()) {
          prepare.execute("PREPARE TRANSACTION '" + gid + "'");
        }
      } else {
        conn.commit();
      }
    }
    if (partition == 0 && spec.fault != null) {
      Faults.inject(spec, context.attemptNumber() == 0);
    }
    return List.of(gid + "\t" + count + "\t" + dead).iterator();
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
      if (!kinds[i].accepted.contains(type)) {
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
      Connection conn, CopyManager copy, Iterator<InternalRow> rows, List<String[]> deadLetters)
      throws SQLException {
    String stage = UUID.randomUUID().toString().replace("-", "");
    try (Statement statement = conn.createStatement()) {
      statement.execute(spec.stageSql.replace(Spec.STAGE, stage));
      copyRows(copy, spec.copySql.replace(Spec.STAGE, stage), rows, deadLetters);
      long merged = statement.executeLargeUpdate(spec.mergeSql.replace(Spec.STAGE, stage));
      statement.execute(spec.dropSql.replace(Spec.STAGE, stage));
      return merged;
    }
  }

  private long copyRows(
      CopyManager copy, String copySql, Iterator<InternalRow> rows, List<String[]> deadLetters)
      throws SQLException {
    BinaryRows out = new BinaryRows(FLUSH_BYTES + (FLUSH_BYTES >> 2));
    CopyIn in = copy.copyIn(copySql);
    long count = 0;
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
        out.row(row, kinds);
        count++;
        if (out.length >= FLUSH_BYTES) {
          in.writeToCopy(out.bytes, 0, out.length);
          out.length = 0;
        }
      }
      out.trailer();
      in.writeToCopy(out.bytes, 0, out.length);
      in.endCopy();
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
  private void copyDeadLetters(CopyManager copy, List<String[]> deadLetters)
      throws SQLException, IOException {
    StringBuilder text = new StringBuilder();
    String prefix = escape(spec.pipeline) + "\t" + spec.batchId + "\t";
    for (String[] letter : deadLetters) {
      text.append(prefix).append(escape(storable(letter[0]))).append('\t');
      text.append(escape(storable(letter[1]))).append('\n');
    }
    byte[] bytes = text.toString().getBytes(StandardCharsets.UTF_8);
    copy.copyIn(spec.deadLetterSql, new java.io.ByteArrayInputStream(bytes));
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

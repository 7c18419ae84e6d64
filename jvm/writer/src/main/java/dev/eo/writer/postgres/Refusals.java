package dev.eo.writer.postgres;

import dev.eo.writer.Halving;
import dev.eo.writer.Json;
import dev.eo.writer.Kind;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

/**
 * Rows the target table refuses, as {@code eo_jobs.sinks.postgres.refusals} finds them: only
 * when the task's write raised SQLSTATE class 22 or 23, its rows are written again in pieces,
 * each under a SAVEPOINT, a refused piece halved until the refused rows stand alone. The rows
 * are the task's binary COPY payload, kept as it was sent ({@link Kept}); a refused row's
 * dead letter carries it as JSON and the database's own words.
 */
final class Refusals {
  static final String SAVEPOINT = "eo_rows";
  private static final Pattern COPY_COLUMN =
      Pattern.compile("^COPY [^\\n]*?, line \\d+, column (.+?)(?::|$)", Pattern.MULTILINE);

  private Refusals() {}

  /** Whether {@code e} is the database refusing a value or a row (class 22 or 23). */
  static boolean isRefusal(SQLException e) {
    String state = e.getSQLState();
    return state != null && (state.startsWith("22") || state.startsWith("23"));
  }

  /**
   * {@code SQLSTATE 23502, column c, constraint k: message (detail)}, as {@code
   * Refusal.words} says it.
   */
  static String words(SQLException e) {
    ServerErrorMessage server = e instanceof PSQLException p ? p.getServerErrorMessage() : null;
    String message = server == null ? e.getMessage() : server.getMessage();
    StringBuilder said = new StringBuilder("SQLSTATE ").append(e.getSQLState());
    if (server != null) {
      String column = server.getColumn();
      if (column == null && server.getWhere() != null) {
        Matcher found = COPY_COLUMN.matcher(server.getWhere());
        column = found.find() ? found.group(1) : null;
      }
      if (column != null) said.append(", column ").append(column);
      if (server.getConstraint() != null) said.append(", constraint ").append(server.getConstraint());
    }
    said.append(": ").append(message);
    if (server != null && server.getDetail() != null) {
      said.append(" (").append(server.getDetail()).append(')');
    }
    return said.toString();
  }

  /**
   * Rows {@code [0, rows)} in pieces under savepoints, in input order ({@link Halving}); rows
   * written. The whole was refused already (and rolled back with its transaction), so the
   * first pieces are its halves.
   */
  static long isolate(Connection conn, int rows, Halving.Piece piece, Halving.Refuse refuse)
      throws SQLException {
    try (Statement statement = conn.createStatement()) {
      Halving.Guard savepoint =
          new Halving.Guard() {
            @Override
            public void before() throws SQLException {
              statement.execute("SAVEPOINT " + SAVEPOINT);
            }

            @Override
            public void undo() throws SQLException {
              statement.execute("ROLLBACK TO SAVEPOINT " + SAVEPOINT);
              statement.execute("RELEASE SAVEPOINT " + SAVEPOINT);
            }

            @Override
            public void keep() throws SQLException {
              statement.execute("RELEASE SAVEPOINT " + SAVEPOINT);
            }
          };
      return Halving.isolate(rows, null, piece, refuse, Refusals::isRefusal, savepoint);
    }
  }

  /**
   * A task's binary COPY payload as it was sent: the segments flushed to the server, header
   * first and trailer last, each ending at a row's end. Kept only when refused rows become
   * dead letters, and read only when the database refused the write.
   *
   * <p>Why a bound: the payload grows with the task's rows, and a batch of many millions of
   * rows in few writer partitions would otherwise hold all of it in the executor's heap beside
   * Spark's own. The first {@code memoryBytes} stay in memory; the rest go to a file under
   * {@code java.io.tmpdir} (the pod's {@code /tmp} emptyDir), unlinked as soon as it is open so
   * that no kill leaves it behind, and read back mapped, one segment at a time.
   */
  static final class Kept implements AutoCloseable {
    private final long memoryBytes;
    private long inMemory;
    /** Per segment: its bytes in memory, or null when it is in the file. */
    private final List<ByteBuffer> held = new ArrayList<>();
    /** Per segment in the file: offset and length; null for one in memory. */
    private final List<long[]> spilled = new ArrayList<>();
    private FileChannel file;
    private long fileLength;
    /** Per row: segment, start, end (found when needed, by reading the payload). */
    private List<int[]> rows;
    private int mappedIndex = -1;
    private ByteBuffer mapped;

    Kept(long memoryBytes) {
      this.memoryBytes = memoryBytes;
    }

    /**
     * Keeps {@code bytes[0, length)}; true when it holds {@code bytes} itself (the caller
     * must not reuse them), false when it copied them to the file (the caller may).
     */
    boolean keep(byte[] bytes, int length) {
      if (inMemory + length <= memoryBytes) {
        held.add(ByteBuffer.wrap(bytes, 0, length).slice());
        spilled.add(null);
        inMemory += length;
        return true;
      }
      try {
        if (file == null) {
          Path path = Files.createTempFile("eo-kept-", ".copy");
          file = FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE);
          Files.delete(path);
        }
        ByteBuffer out = ByteBuffer.wrap(bytes, 0, length);
        while (out.hasRemaining()) {
          file.write(out, fileLength + out.position());
        }
      } catch (IOException e) {
        throw new UncheckedIOException("keeping a task's rows for refused records", e);
      }
      held.add(null);
      spilled.add(new long[] {fileLength, length});
      fileLength += length;
      return false;
    }

    /** The segments kept in the file (for tests and logs). */
    int spilledSegments() {
      return (int) spilled.stream().filter(s -> s != null).count();
    }

    /** Segment {@code s}, its position 0 at its first byte. */
    private ByteBuffer segment(int s) {
      ByteBuffer inside = held.get(s);
      if (inside != null) return inside.duplicate();
      if (mappedIndex != s) {
        long[] at = spilled.get(s);
        try {
          mapped = file.map(FileChannel.MapMode.READ_ONLY, at[0], at[1]);
        } catch (IOException e) {
          throw new UncheckedIOException("reading a task's kept rows back", e);
        }
        mappedIndex = s;
      }
      return mapped.duplicate();
    }

    List<int[]> rows() {
      if (rows != null) return rows;
      rows = new ArrayList<>();
      for (int s = 0; s < held.size(); s++) {
        ByteBuffer in = segment(s);
        if (s == 0) in.position(19); // signature (11), flags (4), header extension length (4)
        while (in.remaining() > 0) {
          int start = in.position();
          int fields = in.getShort();
          if (fields == -1) break; // the trailer
          for (int f = 0; f < fields; f++) {
            int n = in.getInt();
            if (n > 0) in.position(in.position() + n);
          }
          rows.add(new int[] {s, start, in.position()});
        }
      }
      return rows;
    }

    @Override
    public void close() throws IOException {
      mapped = null;
      if (file != null) file.close();
    }

    /** Rows {@code [lo, hi)} as a complete binary COPY payload. */
    byte[] piece(int lo, int hi) {
      BinaryRows out = new BinaryRows(1 << 12);
      out.header();
      List<int[]> all = rows();
      for (int i = lo; i < hi; i++) {
        int[] row = all.get(i);
        out.raw(segment(row[0]), row[1], row[2] - row[1]);
      }
      out.trailer();
      return java.util.Arrays.copyOf(out.bytes, out.length);
    }

    /** Row {@code index} as JSON, column name to value, read back from its binary fields. */
    String json(int index, List<String> columns, Kind[] kinds) {
      int[] row = rows().get(index);
      ByteBuffer in = segment(row[0]);
      in.position(row[1]);
      int fields = in.getShort();
      StringBuilder out = new StringBuilder("{");
      for (int f = 0; f < fields; f++) {
        if (f > 0) out.append(", ");
        Json.quote(out, columns.get(f));
        out.append(": ");
        int n = in.getInt();
        if (n < 0) {
          out.append("null");
          continue;
        }
        int at = in.position();
        switch (kinds[f]) {
          case INT8 -> out.append(in.getLong());
          case INT4 -> out.append(in.getInt());
          case INT2 -> out.append(in.getShort());
          case BOOL -> out.append(in.get() != 0);
          case FLOAT8 -> Json.number(out, in.getDouble());
          case FLOAT4 -> Json.number(out, in.getFloat());
          case TEXT -> {
            byte[] text = new byte[n];
            in.get(at, text);
            Json.quote(out, new String(text, StandardCharsets.UTF_8));
          }
          case TIMESTAMP -> Json.quote(out, timestamp(in.getLong()));
          case DATE -> Json.quote(out, LocalDate.ofEpochDay((long) in.getInt() + BinaryRows.PG_EPOCH_DAYS).toString());
          case NUMERIC -> out.append(BinaryRows.readNumeric(in).toPlainString());
          default -> throw new IllegalStateException("unknown kind " + kinds[f]);
        }
        in.position(at + n);
      }
      return out.append('}').toString();
    }

    private static String timestamp(long pgMicros) {
      if (pgMicros == BinaryRows.OUT_OF_RANGE) {
        return "before -290278 (Spark's earliest instants)";
      }
      // Spark's range (years -290308 to 294247) fits in LocalDateTime's.
      long micros = pgMicros + BinaryRows.PG_EPOCH_MICROS;
      long seconds = Math.floorDiv(micros, 1_000_000L);
      int nanos = (int) Math.floorMod(micros, 1_000_000L) * 1000;
      return LocalDateTime.ofEpochSecond(seconds, nanos, ZoneOffset.UTC).toString();
    }
  }
}

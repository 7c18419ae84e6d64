package dev.eo.writer.postgres;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.eo.writer.Kind;
import java.lang.reflect.Proxy;
import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

class RefusalsTest {
  @Test
  void onlyDataExceptionsAndIntegrityViolationsAreRefusals() {
    for (String state : List.of("22003", "22P02", "22008", "23505", "23502", "23514")) {
      assertTrue(Refusals.isRefusal(new SQLException("x", state)), state);
    }
    for (String state : List.of("40001", "40P01", "08006", "57P03", "42P01", "25P02", "2BP01")) {
      assertFalse(Refusals.isRefusal(new SQLException("x", state)), state);
    }
    assertFalse(Refusals.isRefusal(new SQLException("no state")));
  }

  /** A server error as the protocol carries it: one-letter fields, each NUL-terminated. */
  private static PSQLException server(String... fields) {
    return new PSQLException(new ServerErrorMessage(String.join("\0", fields) + "\0"));
  }

  @Test
  void theWordsNameTheStateColumnConstraintMessageAndDetail() {
    PSQLException e =
        server(
            "SERROR",
            "C23502",
            "Mnull value in column \"amount\" of relation \"t\" violates not-null constraint",
            "DFailing row contains (1, null).",
            "samples",
            "tt",
            "camount");
    assertEquals(
        "SQLSTATE 23502, column amount: null value in column \"amount\" of relation \"t\""
            + " violates not-null constraint (Failing row contains (1, null).)",
        Refusals.words(e));
    assertEquals(
        "SQLSTATE 23505, constraint t_pkey: duplicate key value violates unique constraint"
            + " \"t_pkey\" (Key (id)=(1) already exists.)",
        Refusals.words(
            server(
                "SERROR",
                "C23505",
                "Mduplicate key value violates unique constraint \"t_pkey\"",
                "DKey (id)=(1) already exists.",
                "nt_pkey")));
  }

  @Test
  void aCopyRefusalNamesTheColumnItsContextLineNames() {
    PSQLException e =
        server(
            "SERROR",
            "C22003",
            "Mnumeric field overflow",
            "DA field with precision 5, scale 2 must round to an absolute value less than 10^3.",
            "WCOPY t, line 3, column amount: \"123456\"");
    assertEquals(
        "SQLSTATE 22003, column amount: numeric field overflow (A field with precision 5, scale 2"
            + " must round to an absolute value less than 10^3.)",
        Refusals.words(e));
    assertEquals(
        "SQLSTATE 22P02, column n: invalid input",
        Refusals.words(server("SERROR", "C22P02", "Minvalid input", "WCOPY t, line 1, column n")));
    assertEquals(
        "SQLSTATE 23505: plain", Refusals.words(new SQLException("plain", "23505")));
  }

  /** What {@link Refusals#isolate} sent: SQL texts and pieces, in order. */
  private static final class Recorded {
    final List<String> said = new ArrayList<>();

    Connection connection() {
      Statement statement =
          (Statement)
              Proxy.newProxyInstance(
                  getClass().getClassLoader(),
                  new Class<?>[] {Statement.class},
                  (proxy, method, args) -> {
                    switch (method.getName()) {
                      case "execute" -> {
                        said.add((String) args[0]);
                        return false;
                      }
                      case "close" -> {
                        return null;
                      }
                      default -> throw new UnsupportedOperationException(method.getName());
                    }
                  });
      return (Connection)
          Proxy.newProxyInstance(
              getClass().getClassLoader(),
              new Class<?>[] {Connection.class},
              (proxy, method, args) -> {
                if (method.getName().equals("createStatement")) return statement;
                throw new UnsupportedOperationException(method.getName());
              });
    }
  }

  @Test
  void refusedRowsAreIsolatedByHalvingUnderOneSavepointInInputOrder() throws SQLException {
    Set<Integer> bad = Set.of(2, 5);
    Recorded recorded = new Recorded();
    List<Integer> refused = new ArrayList<>();
    long written =
        Refusals.isolate(
            recorded.connection(),
            6,
            (lo, hi) -> {
              recorded.said.add("piece " + lo + ".." + hi);
              for (int i = lo; i < hi; i++) {
                if (bad.contains(i)) throw new SQLException("refused row " + i, "23514");
              }
              return hi - lo;
            },
            (index, e) -> {
              assertEquals("refused row " + index, e.getMessage());
              refused.add(index);
            });
    assertEquals(4, written);
    assertEquals(List.of(2, 5), refused);
    String savepoint = "SAVEPOINT eo_rows";
    String undo = "ROLLBACK TO SAVEPOINT eo_rows";
    String release = "RELEASE SAVEPOINT eo_rows";
    assertEquals(
        List.of(
            savepoint, "piece 0..3", undo, release, // [0, 3) refused: halves [0, 1), [1, 3)
            savepoint, "piece 0..1", release,
            savepoint, "piece 1..3", undo, release,
            savepoint, "piece 1..2", release,
            savepoint, "piece 2..3", undo, release, // row 2 alone: refused
            savepoint, "piece 3..6", undo, release,
            savepoint, "piece 3..4", release,
            savepoint, "piece 4..6", undo, release,
            savepoint, "piece 4..5", release,
            savepoint, "piece 5..6", undo, release), // row 5 alone: refused
        recorded.said);
  }

  @Test
  void anErrorThatIsNotARefusalStopsTheIsolation() {
    Recorded recorded = new Recorded();
    SQLException lost = new SQLException("gone", "08006");
    SQLException thrown =
        assertThrows(
            SQLException.class,
            () ->
                Refusals.isolate(
                    recorded.connection(),
                    1,
                    (lo, hi) -> {
                      throw lost;
                    },
                    (index, e) -> {}));
    assertEquals(lost, thrown);
    assertEquals(List.of("SAVEPOINT eo_rows"), recorded.said);
  }

  private static final Kind[] KINDS = {
    Kind.INT8, Kind.INT4, Kind.INT2, Kind.BOOL, Kind.FLOAT8, Kind.FLOAT4, Kind.TEXT,
    Kind.TIMESTAMP, Kind.DATE, Kind.NUMERIC
  };
  private static final List<String> COLUMNS =
      List.of("l", "i", "s", "b", "d", "f", "t", "ts", "day", "n");

  private static BinaryRows payload(int rows) {
    BinaryRows out = new BinaryRows(64);
    out.header();
    DecimalType[] decimals = new DecimalType[KINDS.length];
    decimals[9] = new DecimalType(10, 2);
    for (int r = 0; r < rows; r++) {
      Object[] values = {
        (long) r, r * 10, (short) -r, r % 2 == 0, r + 0.5, Float.NaN,
        UTF8String.fromString("row \"" + r + "\"\n\té"), 86_400_000_000L * r + 1,
        (int) LocalDate.of(2026, 1, 1).toEpochDay() + r,
        org.apache.spark.sql.types.Decimal.apply(new BigDecimal("-12.50").add(BigDecimal.valueOf(r)), 10, 2)
      };
      if (r == 1) values[6] = null;
      out.row(new GenericInternalRow(values), KINDS, decimals);
    }
    out.trailer();
    return out;
  }

  @Test
  void aKeptRowReadsBackAsJsonOfItsValues() throws Exception {
    BinaryRows out = payload(2);
    try (Refusals.Kept kept = new Refusals.Kept(1 << 20)) {
      kept.keep(Arrays.copyOf(out.bytes, out.length), out.length);
      assertEquals(2, kept.rows().size());
      assertEquals(
          "{\"l\": 0, \"i\": 0, \"s\": 0, \"b\": true, \"d\": 0.5, \"f\": \"nan\","
              + " \"t\": \"row \\\"0\\\"\\n\\t\\u00e9\", \"ts\": \"1970-01-01T00:00:00.000001\","
              + " \"day\": \"2026-01-01\", \"n\": -12.50}",
          kept.json(0, COLUMNS, KINDS));
      assertEquals(
          "{\"l\": 1, \"i\": 10, \"s\": -1, \"b\": false, \"d\": 1.5, \"f\": \"nan\","
              + " \"t\": null, \"ts\": \"1970-01-02T00:00:00.000001\","
              + " \"day\": \"2026-01-02\", \"n\": -11.50}",
          kept.json(1, COLUMNS, KINDS));
    }
  }

  @Test
  void keptRowsPastTheMemoryBoundSpillAndTheirPiecesAreWholePayloads() throws Exception {
    BinaryRows whole = payload(5);
    byte[] all = Arrays.copyOf(whole.bytes, whole.length);
    // The segments a task flushes, each ending at a row's end: header and rows 0-1, rows 2-4
    // and the trailer.
    int cut = 19 + rowLength(all, 19) + rowLength(all, 19 + rowLength(all, 19));
    try (Refusals.Kept kept = new Refusals.Kept(cut)) {
      assertTrue(kept.keep(Arrays.copyOf(all, cut), cut));
      byte[] rest = Arrays.copyOfRange(all, cut, all.length);
      assertFalse(kept.keep(rest, rest.length)); // past the bound: copied to the file
      assertEquals(1, kept.spilledSegments());
      assertEquals(5, kept.rows().size());
      assertArrayEquals(all, kept.piece(0, 5));
      byte[] middle = kept.piece(1, 4);
      BinaryRows expected = new BinaryRows(1);
      expected.header();
      int start = 19 + rowLength(all, 19);
      int end = start;
      for (int r = 1; r < 4; r++) end += rowLength(all, end);
      expected.raw(all, start, end - start);
      expected.trailer();
      assertArrayEquals(Arrays.copyOf(expected.bytes, expected.length), middle);
      assertEquals(kept.json(3, COLUMNS, KINDS), jsonOfOnly(payload(5), 3));
    }
  }

  private static String jsonOfOnly(BinaryRows out, int index) throws Exception {
    try (Refusals.Kept kept = new Refusals.Kept(1 << 20)) {
      kept.keep(Arrays.copyOf(out.bytes, out.length), out.length);
      return kept.json(index, COLUMNS, KINDS);
    }
  }

  /** The length of the binary COPY row at {@code at}. */
  private static int rowLength(byte[] payload, int at) {
    java.nio.ByteBuffer in = java.nio.ByteBuffer.wrap(payload);
    in.position(at);
    int fields = in.getShort();
    for (int f = 0; f < fields; f++) {
      int n = in.getInt();
      if (n > 0) in.position(in.position() + n);
    }
    return in.position() - at;
  }
}

package dev.eo.writer.mysql;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.eo.writer.Spec;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.function.Predicate;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/**
 * The statements a task sends, in order, against a server that records them (and refuses what
 * a test says it refuses, with MariaDB's error numbers and words): the XA sequence, the
 * statements' sizes, the halving of a refused statement and the dead letters. What the real
 * server does with them is tested from Python against MariaDB (tests/runtime/test_jvm_mysql.py).
 */
class BranchTest {
  private static final String XID = "X'aa',X'bb',1701721137";
  private static final String SESSION =
      "SET SESSION sql_mode = 'STRICT_TRANS_TABLES', time_zone = '+00:00', "
          + "innodb_lock_wait_timeout = 30, wait_timeout = 300";
  private static final String PREFIX = "INSERT INTO `db`.`t` (`id`, `v`) VALUES ";
  private static final String MARKER_SQL =
      "INSERT INTO `eo_markers` (gid, pipeline, batch_id, rows_written) VALUES (%s, %s, %s, %s)";

  /** Records every statement; refuses those {@code refuses} says, with {@code error}. */
  private static final class Recording implements Branch.Server {
    final List<String> sent = new ArrayList<>();
    Predicate<String> refuses = sql -> false;
    SQLException error;
    boolean exists = true;

    @Override
    public void execute(String sql) throws SQLException {
      sent.add(sql);
      if (refuses.test(sql)) throw error;
    }

    @Override
    public boolean anyRow(String sql) {
      sent.add(sql);
      return exists;
    }
  }

  private static Spec spec(boolean twoPhase) {
    Spec spec = new Spec();
    spec.kind = Spec.MYSQL;
    spec.columns = List.of("id", "v");
    spec.tableName = "db.t";
    spec.pipeline = "test/it's";
    spec.batchId = 7;
    spec.twoPhase = twoPhase;
    Spec.MySql my = new Spec.MySql();
    my.sessionSql =
        "SET SESSION sql_mode = %s, time_zone = '+00:00', innodb_lock_wait_timeout = %s, "
            + "wait_timeout = %s";
    my.sqlMode = "STRICT_TRANS_TABLES";
    my.lockWaitTimeoutSeconds = 30;
    my.sessionWaitTimeoutSeconds = 300;
    my.insertPrefix = PREFIX;
    my.insertSuffix = "";
    my.chunkRows = 5000;
    my.statementChars = 1 << 20;
    my.markerSql = MARKER_SQL;
    my.refusalCodes = Map.of(1048, "BAD_NULL_ERROR", 4025, "CONSTRAINT_FAILED");
    spec.mysql = my;
    return spec;
  }

  private static void deadLetters(Spec spec, boolean refused, boolean batch) {
    spec.mysql.deadLetterTable = "`db`.`dl`";
    spec.mysql.deadLetterExistsSql = "SELECT dl";
    spec.mysql.deadLetterDdl = "CREATE dl";
    spec.mysql.deadLetterInsertPrefix = "INSERT INTO `db`.`dl` (pipeline, batch_id, raw, reason) VALUES ";
    spec.mysql.refusedToDeadLetters = refused;
    spec.mysql.batchDeadLetters = batch;
  }

  private static Iterator<InternalRow> rows(Object[]... values) {
    List<InternalRow> rows = new ArrayList<>();
    for (Object[] row : values) {
      Object[] internal = row.clone();
      for (int i = 0; i < internal.length; i++) {
        if (internal[i] instanceof String text) internal[i] = UTF8String.fromString(text);
      }
      rows.add(new GenericInternalRow(internal));
    }
    return rows.iterator();
  }

  private static long[] write(Spec spec, Recording server, Object[]... values) throws SQLException {
    Value[] kinds = new Value[spec.columns.size()];
    java.util.Arrays.fill(kinds, Value.LONG);
    kinds[1] = Value.STRING;
    Literals literals = new Literals(spec.columns, kinds, new DecimalType[kinds.length]);
    return new Branch(spec, literals, server).write("eo1:p:q:s:1:7:0:9", XID, rows(values));
  }

  private static String marker(long rows) {
    return "INSERT INTO `eo_markers` (gid, pipeline, batch_id, rows_written) VALUES "
        + "('eo1:p:q:s:1:7:0:9', 'test/it\\'s', 7, " + rows + ")";
  }

  private static SQLException mariadb(int code, String message) {
    return new SQLException("(conn=12) " + message, "23000", code);
  }

  @Test
  void aTaskIsOneBranchStartedEndedAndPreparedWithItsMarkerInside() throws SQLException {
    Recording server = new Recording();

    long[] written =
        write(spec(true), server, new Object[] {1L, "a"}, new Object[] {2L, null});

    assertArrayEquals(new long[] {2, 0}, written);
    assertEquals(
        List.of(
            SESSION,
            "XA START " + XID,
            PREFIX + "(1,'a'),(2,NULL)",
            marker(2),
            "XA END " + XID,
            "XA PREPARE " + XID),
        server.sent);
  }

  @Test
  void atLeastOnceIsOneCommittedTransactionWithoutAMarker() throws SQLException {
    Recording server = new Recording();

    write(spec(false), server, new Object[] {1L, "a"});

    assertEquals(List.of(SESSION, "BEGIN", PREFIX + "(1,'a')", "COMMIT"), server.sent);
  }

  @Test
  void statementsHoldAtMostChunkRowsRowsAndStatementCharsCharacters() throws SQLException {
    Spec spec = spec(false);
    spec.mysql.chunkRows = 2;
    Recording server = new Recording();
    write(spec, server, new Object[] {1L, "a"}, new Object[] {2L, "b"}, new Object[] {3L, "c"});
    assertEquals(PREFIX + "(1,'a'),(2,'b')", server.sent.get(2));
    assertEquals(PREFIX + "(3,'c')", server.sent.get(3));

    spec = spec(false);
    // Room for the prefix and two literals of 7 characters with their comma, as Python counts.
    spec.mysql.statementChars = PREFIX.length() + 7 + 1 + 7 + 1;
    server = new Recording();
    write(spec, server, new Object[] {1L, "a"}, new Object[] {2L, "b"}, new Object[] {3L, "c"});
    assertEquals(PREFIX + "(1,'a'),(2,'b')", server.sent.get(2));
    assertEquals(PREFIX + "(3,'c')", server.sent.get(3));

    spec.mysql.statementChars -= 1; // one character short of two rows: one row each
    server = new Recording();
    write(spec, server, new Object[] {1L, "a"}, new Object[] {2L, "b"});
    assertEquals(List.of(PREFIX + "(1,'a')", PREFIX + "(2,'b')"), server.sent.subList(2, 4));
  }

  @Test
  void aRefusedStatementIsWrittenAgainInHalvesAndItsRefusedRowIsADeadLetterInTheBranch()
      throws SQLException {
    Spec spec = spec(true);
    deadLetters(spec, true, false);
    Recording server = new Recording();
    server.exists = false;
    server.refuses = sql -> sql.startsWith(PREFIX) && sql.contains("(3,NULL)");
    server.error = mariadb(1048, "Column 'v' cannot be null");

    long[] written =
        write(
            spec,
            server,
            new Object[] {1L, "a"},
            new Object[] {2L, "b"},
            new Object[] {3L, null},
            new Object[] {4L, "d"});

    assertArrayEquals(new long[] {3, 1}, written);
    assertEquals(
        List.of(
            SESSION,
            "SELECT dl",
            "CREATE dl", // before the branch: DDL inside one is refused
            "XA START " + XID,
            PREFIX + "(1,'a'),(2,'b'),(3,NULL),(4,'d')",
            PREFIX + "(1,'a'),(2,'b')",
            PREFIX + "(3,NULL),(4,'d')",
            PREFIX + "(3,NULL)",
            PREFIX + "(4,'d')",
            "INSERT INTO `db`.`dl` (pipeline, batch_id, raw, reason) VALUES ('test/it\\'s',7,"
                + "'{\\\"id\\\": 3, \\\"v\\\": null}','db.t refused the record: MySQL error 1048"
                + " (BAD_NULL_ERROR), column v: Column \\'v\\' cannot be null')",
            marker(3),
            "XA END " + XID,
            "XA PREPARE " + XID),
        server.sent);
  }

  @Test
  void onRefusedRecordFailFailsTheTaskNamingTheBatchAndRollsTheBranchBack() {
    Recording server = new Recording();
    server.refuses = sql -> sql.startsWith(PREFIX) && sql.contains("NULL");
    server.error = mariadb(1048, "Column 'v' cannot be null");

    IllegalStateException e =
        assertThrows(
            IllegalStateException.class,
            () -> write(spec(true), server, new Object[] {1L, "a"}, new Object[] {2L, null}));

    assertEquals(
        "batch 7: db.t refused a record and no dead-letter table or refusal callback takes it:"
            + " MySQL error 1048 (BAD_NULL_ERROR), column v: Column 'v' cannot be null",
        e.getMessage());
    assertEquals(
        List.of("XA END " + XID, "XA ROLLBACK " + XID),
        server.sent.subList(server.sent.size() - 2, server.sent.size()));
  }

  @Test
  void anErrorThatIsNoRefusalFailsTheTaskAtOnceAndRollsTheBranchBack() {
    Recording server = new Recording();
    server.refuses = sql -> sql.startsWith(PREFIX);
    server.error = new SQLException("(conn=12) Lock wait timeout exceeded", "HY000", 1205);

    SQLException e =
        assertThrows(SQLException.class, () -> write(spec(true), server, new Object[] {1L, "a"}));

    assertEquals(1205, e.getErrorCode());
    assertEquals(
        List.of(SESSION, "XA START " + XID, PREFIX + "(1,'a')", "XA END " + XID,
            "XA ROLLBACK " + XID),
        server.sent);
  }

  @Test
  void anUnsendableValueIsRefusedBeforeAnyStatementAndTheOthersLand() throws SQLException {
    Spec spec = spec(false);
    deadLetters(spec, true, false);
    Recording server = new Recording();
    Value[] kinds = {Value.LONG, Value.DOUBLE};
    Literals literals = new Literals(spec.columns, kinds, new DecimalType[2]);

    long[] written =
        new Branch(spec, literals, server)
            .write("eo1:p:q:s:1:7:0:9", XID, rows(new Object[] {1L, Double.NaN},
                new Object[] {2L, 0.5}));

    assertArrayEquals(new long[] {1, 1}, written);
    assertEquals(PREFIX + "(2,0.5e0)", server.sent.get(3));
    assertEquals(
        "INSERT INTO `db`.`dl` (pipeline, batch_id, raw, reason) VALUES ('test/it\\'s',7,"
            + "'{\\\"id\\\": 1, \\\"v\\\": \\\"nan\\\"}','db.t refused the record: not sendable,"
            + " column v: nan can not be used with MySQL: MySQL holds no NaN or infinity')",
        server.sent.get(4));
  }

  @Test
  void theBatchsDeadLettersAreWrittenInTheBranchByTheSinkThatTakesThem() throws SQLException {
    for (boolean takes : new boolean[] {true, false}) {
      Spec spec = spec(true);
      spec.reasonIndex = 3;
      spec.rawIndex = 2;
      if (takes) deadLetters(spec, false, true);
      Recording server = new Recording();

      long[] written =
          write(
              spec,
              server,
              new Object[] {1L, "a", null, null},
              new Object[] {null, null, "{\"id\": \0", "malformed"});

      assertArrayEquals(new long[] {1, takes ? 1 : 0}, written);
      List<String> letters =
          server.sent.stream().filter(s -> s.startsWith("INSERT INTO `db`.`dl`")).toList();
      assertEquals(
          takes
              ? List.of(
                  "INSERT INTO `db`.`dl` (pipeline, batch_id, raw, reason) VALUES"
                      + " ('test/it\\'s',7,'{\\\"id\\\": \\\\u0000','malformed')")
              : List.of(),
          letters);
    }
  }

  @Test
  void anUpsertWritesOneRowPerKeyTheHighestVersionInTheOrderKeysFirstAppear()
      throws SQLException {
    Spec spec = spec(false);
    spec.columns = List.of("k", "v", "version");
    spec.mysql.insertPrefix = "INSERT INTO `db`.`t` (`k`, `v`, `version`) VALUES ";
    spec.mysql.insertSuffix = " ON DUPLICATE KEY UPDATE x";
    spec.mysql.keyIndexes = List.of(0);
    spec.mysql.versionIndex = 2;
    Recording server = new Recording();
    Literals literals =
        new Literals(
            spec.columns,
            new Value[] {Value.STRING, Value.STRING, Value.LONG},
            new DecimalType[3]);

    long[] written =
        new Branch(spec, literals, server)
            .write(
                "eo1:p:q:s:1:7:0:9",
                XID,
                rows(
                    new Object[] {"b", "b-first", 5L},
                    new Object[] {"a", "a-null", null},
                    new Object[] {"b", "b-older", 4L},
                    new Object[] {"a", "a-one", 1L},
                    new Object[] {"b", "b-tie-later", 5L},
                    new Object[] {"a", "a-null-later", null}));

    assertArrayEquals(new long[] {2, 0}, written);
    assertEquals(
        "INSERT INTO `db`.`t` (`k`, `v`, `version`) VALUES ('b','b-tie-later',5),"
            + "('a','a-one',1) ON DUPLICATE KEY UPDATE x",
        server.sent.get(2));
  }

  @Test
  void theXidIsTheDriversPartsWithTheTasksPartitionAndAttemptBetween() {
    Spec.MySql my = new Spec.MySql();
    my.gtrid = "7465737400";
    my.bqualHead = "6f7264657273";
    my.bqualTail = "deadbeef";
    my.formatId = 0x656F3031L;
    assertEquals(
        "X'7465737400',X'6f7264657273"
            + "0000000000000003"
            + "00000000000001c8"
            + "deadbeef',1701785649",
        Xa.xid(my, 3, 456));
    my.gtrid = "zz";
    assertThrows(IllegalArgumentException.class, () -> Xa.xid(my, 3, 456));
  }

  @Test
  void markerValuesAreLiteralsAsPyMySqlFormatsThem() {
    assertEquals(marker(12), Branch.format(MARKER_SQL, "eo1:p:q:s:1:7:0:9", "test/it's", 7L, 12L));
    assertThrows(IllegalArgumentException.class, () -> Branch.format(MARKER_SQL, "only one"));
  }
}

package dev.eo.writer.mysql;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.SQLException;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The server's words as {@code sinks.mysql.refusals.Refusal.of} reads them (MariaDB 10.11's). */
class RefusalTest {
  private static final Map<Integer, String> CODES =
      Map.of(
          1048, "BAD_NULL_ERROR",
          1062, "DUP_ENTRY",
          1406, "DATA_TOO_LONG",
          1452, "NO_REFERENCED_ROW_2",
          4025, "CONSTRAINT_FAILED",
          1292, "TRUNCATED_WRONG_VALUE");

  private static Refusal of(int code, String message) {
    return Refusal.of(new SQLException("(conn=42) " + message, "23000", code), CODES);
  }

  @Test
  void aNullInANotNullColumnNamesTheColumn() {
    assertEquals(
        "MySQL error 1048 (BAD_NULL_ERROR), column merchant: Column 'merchant' cannot be null",
        of(1048, "Column 'merchant' cannot be null").words());
  }

  @Test
  void aCheckNamesItsConstraint() {
    assertEquals(
        "MySQL error 4025 (CONSTRAINT_FAILED), constraint refusing: CONSTRAINT `refusing`"
            + " failed for `db`.`latest`",
        of(4025, "CONSTRAINT `refusing` failed for `db`.`latest`").words());
  }

  @Test
  void aForeignKeyNamesItsConstraintAndColumn() {
    Refusal refusal =
        of(
            1452,
            "Cannot add or update a child row: a foreign key constraint fails (`db`.`c`,"
                + " CONSTRAINT `c_p` FOREIGN KEY (`parent`) REFERENCES `p` (`id`))");
    assertEquals("c_p", refusal.constraint);
    assertEquals("parent", refusal.column);
  }

  @Test
  void aDuplicateNamesItsKeyAndAQualifiedColumnItsLastPart() {
    assertEquals("PRIMARY", of(1062, "Duplicate entry '1' for key 'PRIMARY'").constraint);
    assertEquals(
        "day",
        of(1292, "Incorrect date value: '0000-00-00' for column `db`.`t`.`day` at row 1").column);
  }

  @Test
  void onlyTheListedNumbersAreRefusals() {
    assertTrue(Refusal.isRefusal(new SQLException("x", "23000", 1048), CODES));
    assertFalse(Refusal.isRefusal(new SQLException("x", "HY000", 1205), CODES));
  }

  @Test
  void aReasonAndAFailureSayItAsThePythonWriterDoes() {
    Refusal refusal = of(1406, "Data too long for column 'note' at row 1");
    assertEquals(
        "db.t refused the record: MySQL error 1406 (DATA_TOO_LONG), column note: Data too long"
            + " for column 'note' at row 1",
        refusal.reason("db.t"));
    assertEquals(
        "batch 3: db.t refused a record and no dead-letter table or refusal callback takes it:"
            + " MySQL error 1406 (DATA_TOO_LONG), column note: Data too long for column 'note'"
            + " at row 1",
        refusal.failure("db.t", 3));
  }
}

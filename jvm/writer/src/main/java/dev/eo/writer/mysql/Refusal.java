package dev.eo.writer.mysql;

import java.sql.SQLException;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Why the table refused a row, in the Python writer's words ({@code sinks.mysql.refusals.Refusal}):
 * the server's error number and name, the column and constraint (or unique key) its message
 * names, and the message itself; or a value the client cannot send (a NaN or infinity).
 */
public final class Refusal {
  private static final Pattern CONNECTION = Pattern.compile("^\\(conn=\\d+\\) ");
  private static final Pattern QUOTED_COLUMN = Pattern.compile("[Cc]olumn '((?:[^']|'')+)'");
  private static final Pattern QUALIFIED_COLUMN =
      Pattern.compile("column `(?:[^`]|``)*`\\.`(?:[^`]|``)*`\\.`((?:[^`]|``)+)`");
  private static final Pattern FOREIGN_KEY =
      Pattern.compile("CONSTRAINT `((?:[^`]|``)+)` FOREIGN KEY \\(`((?:[^`]|``)+)`");
  private static final Pattern CONSTRAINT =
      Pattern.compile("CONSTRAINT `((?:[^`]|``)+)`|[Cc]heck constraint '((?:[^']|'')+)'");
  private static final Pattern KEY = Pattern.compile("for key '((?:[^']|'')+)'");

  /** The error number; null for a value the client cannot send. */
  final Integer code;
  final String name;
  final String message;
  final String column;
  final String constraint;

  Refusal(Integer code, String name, String message, String column, String constraint) {
    this.code = code;
    this.name = name;
    this.message = message;
    this.column = column;
    this.constraint = constraint;
  }

  /** Whether {@code e} is the table refusing a value or a row ({@code REFUSAL_CODES}). */
  static boolean isRefusal(SQLException e, Map<Integer, String> codes) {
    return codes.containsKey(e.getErrorCode());
  }

  /**
   * The server's message as the server wrote it: Connector/J puts {@code (conn=N) } before it,
   * which PyMySQL does not.
   */
  static String serverMessage(SQLException e) {
    String message = e.getMessage() == null ? "" : e.getMessage();
    return CONNECTION.matcher(message).replaceFirst("");
  }

  /** From a server error: its number, its message, the names the message gives. */
  static Refusal of(SQLException e, Map<Integer, String> codes) {
    String message = serverMessage(e);
    String column = null;
    String constraint = null;
    Matcher found = FOREIGN_KEY.matcher(message);
    if (found.find()) {
      constraint = found.group(1);
      column = found.group(2);
    } else {
      found = CONSTRAINT.matcher(message);
      if (!found.find()) {
        found = KEY.matcher(message);
        if (!found.find()) found = null;
      }
      if (found != null) {
        for (int g = 1; g <= found.groupCount(); g++) {
          if (found.group(g) != null) {
            constraint = found.group(g);
            break;
          }
        }
      }
    }
    if (column == null) {
      found = QUALIFIED_COLUMN.matcher(message);
      if (!found.find()) {
        found = QUOTED_COLUMN.matcher(message);
        if (!found.find()) found = null;
      }
      if (found != null) column = found.group(1);
    }
    int code = e.getErrorCode();
    return new Refusal(code, codes.getOrDefault(code, "?"), message, column, constraint);
  }

  /** A value the client cannot send ({@code Refusal.unsendable}). */
  static Refusal unsendable(String column, String words) {
    return new Refusal(
        null, "client", words + ": MySQL holds no NaN or infinity", column, null);
  }

  /** {@code MySQL error 1048 (BAD_NULL_ERROR), column c: Column 'c' cannot be null}. */
  String words() {
    StringBuilder said = new StringBuilder();
    if (code == null) {
      said.append("not sendable");
    } else {
      said.append("MySQL error ").append(code).append(" (").append(name).append(')');
    }
    if (column != null && !column.isEmpty()) said.append(", column ").append(column);
    if (constraint != null && !constraint.isEmpty()) {
      said.append(", constraint ").append(constraint);
    }
    return said.append(": ").append(message).toString();
  }

  /** A dead letter's reason. */
  String reason(String table) {
    return table + " refused the record: " + words();
  }

  /** Why a task stops when refused rows fail it ({@code onRefusedRecord: fail}). */
  String failure(String table, long batchId) {
    return "batch " + batchId + ": " + table + " refused a record and no dead-letter table or "
        + "refusal callback takes it: " + words();
  }
}

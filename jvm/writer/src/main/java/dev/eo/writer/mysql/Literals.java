package dev.eo.writer.mysql;

import dev.eo.writer.Json;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DecimalType;

/**
 * Spark's internal rows as MySQL row literals {@code (v1,v2,...)}, each value meaning what the
 * Python writer's literal means ({@code sinks.mysql.literals}, {@code arrow_literals}), so both
 * paths store the same values:
 *
 * <ul>
 *   <li>integers as decimal text; booleans {@code 1}/{@code 0}; NULL as {@code NULL};
 *   <li>decimals in plain notation (never {@code 1E-7}, which MySQL would read as a DOUBLE);
 *   <li>floats as a text that reads back as the same double, with an exponent ({@code 1.5e0})
 *       so that the server reads a DOUBLE literal, not a DECIMAL one; a FLOAT widened first;
 *       a NaN or infinity is {@link Unsendable} (its row is refused: MySQL holds neither);
 *   <li>strings quoted and escaped as PyMySQL's {@code escape_string} (backslash, NUL, {@code
 *       \n}, {@code \r}, ctrl-Z, both quotes): the writer's session never has {@code
 *       NO_BACKSLASH_ESCAPES} ({@code writer.SQL_MODE} is set in full);
 *   <li>binary as a hex literal {@code X'...'} (the bytes as they are, whatever the charset);
 *   <li>dates {@code 'YYYY-MM-DD'}; timestamps {@code 'YYYY-MM-DD HH:MM:SS.ffffff'}, an instant as
 *       its UTC wall time (the session's {@code time_zone} is {@code +00:00}), a TIMESTAMP_NTZ
 *       as itself.
 * </ul>
 */
public final class Literals {
  private static final char[] HEX = "0123456789ABCDEF".toCharArray();

  private final List<String> columns;
  private final Value[] values;
  private final DecimalType[] decimals;

  /** The literals of the first {@code values.length} fields of a row ({@code decimals[i]}: the
   * Spark type of a DECIMAL field, whose precision says how the row holds it). */
  public Literals(List<String> columns, Value[] values, DecimalType[] decimals) {
    this.columns = columns;
    this.values = values;
    this.decimals = decimals;
  }

  /** A value PyMySQL cannot write either (NaN, infinity): its row is refused. */
  public static final class Unsendable extends Exception {
    private static final long serialVersionUID = 1L;
    public final String column;
    /** PyMySQL's words: {@code nan can not be used with MySQL}. */
    public final String words;

    Unsendable(String column, String words) {
      super("column " + column + ": " + words);
      this.column = column;
      this.words = words;
    }
  }

  /** Appends {@code (v1,v2,...)} of {@code row}; throws before appending a thing if a value
   * cannot be sent. */
  public void row(StringBuilder out, InternalRow row) throws Unsendable {
    check(row);
    out.append('(');
    for (int i = 0; i < values.length; i++) {
      if (i > 0) out.append(',');
      value(out, row, i);
    }
    out.append(')');
  }

  /** Refuses a row with a NaN or infinite float, naming its first such column. */
  private void check(InternalRow row) throws Unsendable {
    for (int i = 0; i < values.length; i++) {
      if (row.isNullAt(i)) continue;
      double d;
      if (values[i] == Value.DOUBLE) {
        d = row.getDouble(i);
      } else if (values[i] == Value.FLOAT) {
        d = row.getFloat(i);
      } else {
        continue;
      }
      if (!Double.isFinite(d)) {
        String repr = Double.isNaN(d) ? "nan" : d > 0 ? "inf" : "-inf";
        throw new Unsendable(columns.get(i), repr + " can not be used with MySQL");
      }
    }
  }

  /** Field {@code i}'s literal. */
  void value(StringBuilder out, InternalRow row, int i) {
    if (nullOrInteger(out, row, i, "NULL")) return;
    switch (values[i]) {
      case BOOLEAN -> out.append(row.getBoolean(i) ? '1' : '0');
      case FLOAT -> floating(out, row.getFloat(i));
      case DOUBLE -> floating(out, row.getDouble(i));
      case DECIMAL -> out.append(decimal(row, i).toPlainString());
      case STRING -> string(out, row.getUTF8String(i).toString());
      case BINARY -> binary(out, row.getBinary(i));
      case DATE -> {
        out.append('\'');
        Json.date(out, java.time.LocalDate.ofEpochDay(row.getInt(i)));
        out.append('\'');
      }
      case TIMESTAMP -> {
        out.append('\'');
        Json.wallTime(out, row.getLong(i), ' ', true);
        out.append('\'');
      }
      case NULL -> out.append("NULL");
      default -> throw new IllegalStateException("unknown value kind " + values[i]);
    }
  }

  /**
   * Appends field {@code i} when it is NULL ({@code nullText}) or an integer, whose decimal text
   * is the same in a MySQL literal and in {@code record_json}; false, appending nothing, for any
   * other kind, which {@link #value} and {@link #json} each write their own way.
   */
  private boolean nullOrInteger(StringBuilder out, InternalRow row, int i, String nullText) {
    if (row.isNullAt(i)) {
      out.append(nullText);
      return true;
    }
    switch (values[i]) {
      case BYTE -> out.append(row.getByte(i));
      case SHORT -> out.append(row.getShort(i));
      case INT -> out.append(row.getInt(i));
      case LONG -> out.append(row.getLong(i));
      default -> {
        return false;
      }
    }
    return true;
  }

  /** Field {@code i}'s value kind. */
  Value kind(int i) {
    return values[i];
  }

  java.math.BigDecimal decimal(InternalRow row, int i) {
    return row.getDecimal(i, decimals[i].precision(), decimals[i].scale()).toJavaBigDecimal();
  }

  /** A finite double as a DOUBLE literal: Java's round-trip text, an exponent added if none. */
  static void floating(StringBuilder out, double value) {
    String text = Double.toString(value);
    out.append(text);
    if (text.indexOf('E') < 0) out.append("e0");
  }

  /** A string literal, escaped as PyMySQL's {@code escape_string}. */
  public static void string(StringBuilder out, String text) {
    out.append('\'');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      switch (c) {
        case '\\' -> out.append("\\\\");
        case '\0' -> out.append("\\0");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\u001a' -> out.append("\\Z");
        case '"' -> out.append("\\\"");
        case '\'' -> out.append("\\'");
        default -> out.append(c);
      }
    }
    out.append('\'');
  }

  static void binary(StringBuilder out, byte[] bytes) {
    out.append("X'");
    for (byte b : bytes) {
      out.append(HEX[(b >> 4) & 15]).append(HEX[b & 15]);
    }
    out.append('\'');
  }

  /** Field {@code i} as Python's {@code record_json} writes the Python path's value. */
  void json(StringBuilder out, InternalRow row, int i) {
    if (nullOrInteger(out, row, i, "null")) return;
    switch (values[i]) {
      case BOOLEAN -> out.append(row.getBoolean(i));
      case FLOAT -> Json.number(out, row.getFloat(i));
      case DOUBLE -> Json.number(out, row.getDouble(i));
      case DECIMAL -> Json.quote(out, decimal(row, i).toString()); // str(Decimal)
      case STRING -> Json.quote(out, row.getUTF8String(i).toString());
      case BINARY -> Json.quote(out, new String(row.getBinary(i), StandardCharsets.UTF_8));
      case DATE -> Json.quote(out, Json.date(row.getInt(i)));
      case TIMESTAMP -> Json.quote(out, Json.timestamp(row.getLong(i)));
      case NULL -> out.append("null");
      default -> throw new IllegalStateException("unknown value kind " + values[i]);
    }
  }

  /** A row as the dead letter's {@code raw}: column name to value ({@code record_json}). */
  public String json(InternalRow row) {
    StringBuilder out = new StringBuilder("{");
    for (int i = 0; i < values.length; i++) {
      if (i > 0) out.append(", ");
      Json.quote(out, columns.get(i));
      out.append(": ");
      json(out, row, i);
    }
    return out.append('}').toString();
  }
}

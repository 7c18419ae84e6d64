package dev.eo.writer.mysql;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.math.BigDecimal;
import java.util.List;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

class LiteralsTest {
  /** The literal of one value of kind {@code value} (a DECIMAL of {@code decimal}'s type). */
  private static String literal(Value value, Object internal, DecimalType decimal)
      throws Literals.Unsendable {
    Literals literals =
        new Literals(List.of("c"), new Value[] {value}, new DecimalType[] {decimal});
    StringBuilder out = new StringBuilder();
    literals.row(out, new GenericInternalRow(new Object[] {internal}));
    String row = out.toString();
    assertEquals('(', row.charAt(0));
    assertEquals(')', row.charAt(row.length() - 1));
    return row.substring(1, row.length() - 1);
  }

  private static String literal(Value value, Object internal) throws Literals.Unsendable {
    return literal(value, internal, null);
  }

  private static Decimal decimal(String text, DecimalType type) {
    return Decimal.apply(new BigDecimal(text), type.precision(), type.scale());
  }

  @Test
  void integersAndBooleansAreTheirDecimalText() throws Exception {
    assertEquals("-128", literal(Value.BYTE, (byte) -128));
    assertEquals("32767", literal(Value.SHORT, (short) 32767));
    assertEquals("-2147483648", literal(Value.INT, Integer.MIN_VALUE));
    assertEquals("9223372036854775807", literal(Value.LONG, Long.MAX_VALUE));
    assertEquals("1", literal(Value.BOOLEAN, true));
    assertEquals("0", literal(Value.BOOLEAN, false));
  }

  @Test
  void aNullOfAnyKindIsNull() throws Exception {
    for (Value value : Value.values()) {
      assertEquals("NULL", literal(value, null, DataTypes.createDecimalType(10, 2)), value.name());
    }
  }

  @Test
  void stringsAreQuotedAndEscapedAsPyMySqlEscapesThem() throws Exception {
    String text = "it's a \"quote\", back\\slash, nul\0, new\nline, cr\r, ctrl-z\u001a, tab\t";
    assertEquals(
        "'it\\'s a \\\"quote\\\", back\\\\slash, nul\\0, new\\nline, cr\\r, ctrl-z\\Z, tab\t'",
        literal(Value.STRING, UTF8String.fromString(text)));
  }

  @Test
  void unicodeIsSentAsItIs() throws Exception {
    String text = "é € 日本 \uD83D\uDE00";
    assertEquals("'" + text + "'", literal(Value.STRING, UTF8String.fromString(text)));
    assertEquals("''", literal(Value.STRING, UTF8String.fromString("")));
  }

  @Test
  void floatsReadBackAsTheSameDoubleAndAreDoubleLiterals() throws Exception {
    assertEquals("1.5e0", literal(Value.DOUBLE, 1.5));
    assertEquals("-0.0e0", literal(Value.DOUBLE, -0.0));
    assertEquals("1.0E16", literal(Value.DOUBLE, 1e16));
    assertEquals("4.9E-324", literal(Value.DOUBLE, Double.MIN_VALUE));
    assertEquals("1.7976931348623157E308", literal(Value.DOUBLE, Double.MAX_VALUE));
    // A FLOAT is widened first, as the Python path's to_pylist does.
    String widened = literal(Value.FLOAT, 0.1f);
    assertEquals((double) 0.1f, Double.parseDouble(widened.replace("e0", "")));
    assertEquals("0.10000000149011612e0", widened);
  }

  @Test
  void aNanOrInfinityIsUnsendableNamingTheColumnAsPyMySqlSaysIt() {
    Object[][] cases = {
      {Value.DOUBLE, Double.NaN, "nan"},
      {Value.DOUBLE, Double.POSITIVE_INFINITY, "inf"},
      {Value.DOUBLE, Double.NEGATIVE_INFINITY, "-inf"},
      {Value.FLOAT, Float.NaN, "nan"},
      {Value.FLOAT, Float.NEGATIVE_INFINITY, "-inf"},
    };
    for (Object[] c : cases) {
      Literals.Unsendable e =
          assertThrows(Literals.Unsendable.class, () -> literal((Value) c[0], c[1]));
      assertEquals("c", e.column);
      assertEquals(c[2] + " can not be used with MySQL", e.words);
    }
  }

  @Test
  void anUnsendableValueInALaterColumnAppendsNothing() {
    Literals literals =
        new Literals(
            List.of("id", "ratio"), new Value[] {Value.LONG, Value.DOUBLE}, new DecimalType[2]);
    StringBuilder out = new StringBuilder("kept");
    Literals.Unsendable e =
        assertThrows(
            Literals.Unsendable.class,
            () -> literals.row(out, new GenericInternalRow(new Object[] {7L, Double.NaN})));
    assertEquals("ratio", e.column);
    assertEquals("kept", out.toString());
  }

  @Test
  void decimalsArePlainTextWithTheirScaleNeverAnExponent() throws Exception {
    DecimalType money = DataTypes.createDecimalType(12, 2);
    assertEquals("1.50", literal(Value.DECIMAL, decimal("1.5", money), money));
    assertEquals("-0.01", literal(Value.DECIMAL, decimal("-0.01", money), money));
    DecimalType tiny = DataTypes.createDecimalType(10, 9);
    assertEquals("0.000000001", literal(Value.DECIMAL, decimal("1E-9", tiny), tiny));
    assertEquals("0.000000000", literal(Value.DECIMAL, decimal("0", tiny), tiny));
    DecimalType wide = DataTypes.createDecimalType(38, 10);
    String digits = "1234567890123456789012345678.0123456789";
    assertEquals(digits, literal(Value.DECIMAL, decimal(digits, wide), wide));
  }

  @Test
  void timestampsAreUtcWallTimesWithMicroseconds() throws Exception {
    assertEquals("'1970-01-01 00:00:00.000000'", literal(Value.TIMESTAMP, 0L));
    assertEquals("'1969-12-31 23:59:59.999999'", literal(Value.TIMESTAMP, -1L));
    // 2026-03-29 01:30:00.123456 UTC (a daylight saving change in Europe: no zone applies)
    assertEquals("'2026-03-29 01:30:00.123456'", literal(Value.TIMESTAMP, 1_774_747_800_123_456L));
    assertEquals("'0001-01-01 00:00:00.000000'", literal(Value.TIMESTAMP, -62_135_596_800_000_000L));
    assertEquals("'9999-12-31 23:59:59.999999'", literal(Value.TIMESTAMP, 253_402_300_799_999_999L));
  }

  @Test
  void datesAreIsoDates() throws Exception {
    assertEquals("'1970-01-01'", literal(Value.DATE, 0));
    assertEquals("'1999-12-31'", literal(Value.DATE, 10_956));
    assertEquals("'0001-01-01'", literal(Value.DATE, -719_162));
  }

  @Test
  void binaryIsAHexLiteralOfItsBytes() throws Exception {
    assertEquals("X'00FF27'", literal(Value.BINARY, new byte[] {0, (byte) 0xff, '\''}));
    assertEquals("X''", literal(Value.BINARY, new byte[0]));
  }

  @Test
  void aRowIsItsLiteralsInOrder() throws Exception {
    Literals literals =
        new Literals(
            List.of("id", "note", "flag"),
            new Value[] {Value.LONG, Value.STRING, Value.BOOLEAN},
            new DecimalType[3]);
    StringBuilder out = new StringBuilder();
    literals.row(out, new GenericInternalRow(new Object[] {1L, UTF8String.fromString("a"), null}));
    assertEquals("(1,'a',NULL)", out.toString());
  }

  @Test
  void aRefusedRowIsJsonAsPythonsRecordJsonWritesIt() {
    DecimalType money = DataTypes.createDecimalType(12, 2);
    DecimalType tiny = DataTypes.createDecimalType(10, 9);
    Literals literals =
        new Literals(
            List.of("id", "ratio", "big", "amount", "small", "note", "at", "day", "raw", "ok", "no"),
            new Value[] {
              Value.LONG, Value.DOUBLE, Value.DOUBLE, Value.DECIMAL, Value.DECIMAL, Value.STRING,
              Value.TIMESTAMP, Value.DATE, Value.BINARY, Value.BOOLEAN, Value.NULL
            },
            new DecimalType[] {null, null, null, money, tiny, null, null, null, null, null, null});
    GenericInternalRow row =
        new GenericInternalRow(
            new Object[] {
              7L,
              Double.NaN,
              1e16,
              decimal("1.5", money),
              decimal("1E-7", tiny),
              UTF8String.fromString("é \"q\" \\ \b\f\n\u007f \uD83D\uDE00"),
              1_774_747_800_000_000L,
              10_956,
              new byte[] {'h', 'i', (byte) 0xff},
              true,
              null
            });
    assertEquals(
        "{\"id\": 7, \"ratio\": \"nan\", \"big\": 1e+16, \"amount\": \"1.50\", \"small\":"
            + " \"1.00E-7\", \"note\": \"\\u00e9 \\\"q\\\" \\\\ \\b\\f\\n\\u007f"
            + " \\ud83d\\ude00\", \"at\": \"2026-03-29T01:30:00\", \"day\": \"1999-12-31\","
            + " \"raw\": \"hi\\ufffd\", \"ok\": true, \"no\": null}",
        literals.json(row));
  }
}

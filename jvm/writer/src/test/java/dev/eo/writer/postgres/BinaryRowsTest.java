package dev.eo.writer.postgres;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.eo.writer.Kind;
import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.LocalDate;
import java.time.temporal.ChronoUnit;
import java.util.Arrays;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Spark's internal rows against PostgreSQL's binary COPY format as its documentation gives it
 * ("COPY", "Binary Format"; each type's send/receive function): the expected bytes are written
 * here field by field, big-endian, independently of {@link BinaryRows}.
 */
class BinaryRowsTest {
  private static final Kind[] NONE = {};

  /** The bytes {@code fill} writes, big-endian, as PostgreSQL's protocol has them. */
  private interface Fill {
    void into(DataOutputStream out) throws IOException;
  }

  private static byte[] expected(Fill fill) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    DataOutputStream out = new DataOutputStream(bytes);
    fill.into(out);
    out.flush();
    return bytes.toByteArray();
  }

  private static byte[] written(BinaryRows rows) {
    return Arrays.copyOf(rows.bytes, rows.length);
  }

  /** One row of one field of {@code kind} holding {@code value}. */
  private static byte[] one(Kind kind, Object value, DecimalType decimal) {
    BinaryRows rows = new BinaryRows(4); // small: every write grows the buffer
    rows.row(
        new GenericInternalRow(new Object[] {value}), new Kind[] {kind}, new DecimalType[] {decimal});
    return written(rows);
  }

  private static byte[] one(Kind kind, Object value) {
    return one(kind, value, null);
  }

  @Test
  void theHeaderIsTheSignatureNoFlagsAndNoExtensionAndTheTrailerIsMinusOne() throws IOException {
    BinaryRows rows = new BinaryRows(1);
    rows.header();
    rows.trailer();
    byte[] signature = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', (byte) 0xff, '\r', '\n', 0};
    assertArrayEquals(
        expected(
            out -> {
              out.write(signature);
              out.writeInt(0); // flags: no OIDs
              out.writeInt(0); // header extension area length
              out.writeShort(-1); // trailer: field count -1
            }),
        written(rows));
  }

  @Test
  void integersAreTheirWidthBigEndianAfterTheirLength() throws IOException {
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(8); o.writeLong(-2L); }),
        one(Kind.INT8, -2L));
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(8); o.writeLong(0x0102030405060708L); }),
        one(Kind.INT8, 0x0102030405060708L));
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(4); o.writeInt(Integer.MIN_VALUE); }),
        one(Kind.INT4, Integer.MIN_VALUE));
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(2); o.writeShort(-300); }),
        one(Kind.INT2, (short) -300));
  }

  @Test
  void aBooleanIsOneByte() throws IOException {
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(1); o.writeByte(1); }), one(Kind.BOOL, true));
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(1); o.writeByte(0); }), one(Kind.BOOL, false));
  }

  @Test
  void floatsAreTheirIeeeBits() throws IOException {
    assertArrayEquals(
        new byte[] {0, 1, 0, 0, 0, 8, 0x3f, (byte) 0xf8, 0, 0, 0, 0, 0, 0},
        one(Kind.FLOAT8, 1.5d));
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(8); o.writeLong(0x8000000000000000L); }),
        one(Kind.FLOAT8, -0.0d));
    assertArrayEquals(
        new byte[] {0, 1, 0, 0, 0, 4, (byte) 0xc0, 0x20, 0, 0}, one(Kind.FLOAT4, -2.5f));
  }

  @Test
  void textIsItsUtf8Bytes() throws IOException {
    String text = "a\té€\u0000z";
    byte[] utf8 = text.getBytes(StandardCharsets.UTF_8);
    assertEquals(9, utf8.length);
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(utf8.length); o.write(utf8); }),
        one(Kind.TEXT, UTF8String.fromString(text)));
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(0); }),
        one(Kind.TEXT, UTF8String.fromString("")));
  }

  @Test
  void aTimestampIsMicrosecondsSince2000() throws IOException {
    Instant pgEpoch = Instant.parse("2000-01-01T00:00:00Z");
    Instant instant = Instant.parse("2026-11-29T05:46:10.123456Z");
    long sparkMicros = ChronoUnit.MICROS.between(Instant.EPOCH, instant);
    long pgMicros = ChronoUnit.MICROS.between(pgEpoch, instant);
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(8); o.writeLong(pgMicros); }),
        one(Kind.TIMESTAMP, sparkMicros));
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(8); o.writeLong(-946_684_800_000_000L); }),
        one(Kind.TIMESTAMP, 0L));
  }

  @Test
  void aTimestampPostgresqlCannotHoldIsSentAsOneItRefusesNeverAsInfinity() {
    // PostgreSQL reads Long.MIN_VALUE as -infinity and Long.MAX_VALUE as infinity; anything
    // else before 4713 BC it refuses (22008).
    assertEquals(BinaryRows.OUT_OF_RANGE, BinaryRows.pgMicros(Long.MIN_VALUE));
    assertEquals(
        BinaryRows.OUT_OF_RANGE, BinaryRows.pgMicros(Long.MIN_VALUE + BinaryRows.PG_EPOCH_MICROS));
    assertEquals(
        Long.MIN_VALUE + 1, BinaryRows.pgMicros(Long.MIN_VALUE + 1 + BinaryRows.PG_EPOCH_MICROS));
    assertEquals(Long.MAX_VALUE - BinaryRows.PG_EPOCH_MICROS, BinaryRows.pgMicros(Long.MAX_VALUE));
  }

  @Test
  void aDateIsDaysSince2000() throws IOException {
    int sparkDays = (int) LocalDate.of(1999, 12, 31).toEpochDay();
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(4); o.writeInt(-1); }),
        one(Kind.DATE, sparkDays));
    int later = (int) LocalDate.of(2026, 11, 29).toEpochDay();
    int pgDays = (int) ChronoUnit.DAYS.between(LocalDate.of(2000, 1, 1), LocalDate.of(2026, 11, 29));
    assertArrayEquals(
        expected(o -> { o.writeShort(1); o.writeInt(4); o.writeInt(pgDays); }),
        one(Kind.DATE, later));
  }

  /**
   * numeric_send: ndigits, weight of the first base-10000 digit, sign (0 or 0x4000), display
   * scale, then the digits; leading and trailing zero digits are not sent.
   */
  @ParameterizedTest(name = "{0} as DECIMAL({1},{2})")
  @CsvSource(
      delimiter = ';',
      value = {
        "12345.678; 10; 3; 1; 0; 3; 1 2345 6780",
        "-12345.678; 10; 3; 1; 16384; 3; 1 2345 6780",
        "1.5; 5; 1; 0; 0; 1; 1 5000",
        "0.0001; 5; 4; -1; 0; 4; 1",
        "-0.0001; 5; 4; -1; 16384; 4; 1",
        "10000; 10; 0; 1; 0; 0; 1",
        "100000000.00; 12; 2; 2; 0; 2; 1",
        "0.00; 5; 2; 0; 0; 2; ''",
        "123456789012345678901234567890.5; 38; 1; 7; 0; 1; 12 3456 7890 1234 5678 9012 3456 7890 5000",
      })
  void aDecimalIsNumericsBase10000Digits(
      String value, int precision, int scale, int weight, int sign, int dscale, String digits)
      throws IOException {
    int[] groups =
        digits.isBlank()
            ? new int[0]
            : Arrays.stream(digits.trim().split(" ")).mapToInt(Integer::parseInt).toArray();
    DecimalType type = new DecimalType(precision, scale);
    Decimal decimal = Decimal.apply(new BigDecimal(value), precision, scale);
    assertArrayEquals(
        expected(
            o -> {
              o.writeShort(1);
              o.writeInt(8 + 2 * groups.length);
              o.writeShort(groups.length);
              o.writeShort(weight);
              o.writeShort(sign);
              o.writeShort(dscale);
              for (int g : groups) o.writeShort(g);
            }),
        one(Kind.NUMERIC, decimal, type));
  }

  @ParameterizedTest
  @CsvSource({"12345.678", "-0.0001", "10000", "0.00", "-98765432109876543210.123456789"})
  void aNumericReadsBackAsTheSameDecimal(String value) {
    BinaryRows rows = new BinaryRows(1);
    rows.numeric(new BigDecimal(value));
    ByteBuffer in = ByteBuffer.wrap(rows.bytes, 0, rows.length);
    assertEquals(8 + 2 * in.getShort(4), in.getInt());
    assertEquals(new BigDecimal(value), BinaryRows.readNumeric(in));
  }

  @Test
  void aNullIsLengthMinusOneAndOnlyTheWrittenColumnsAreSent() throws IOException {
    BinaryRows rows = new BinaryRows(8);
    GenericInternalRow row =
        new GenericInternalRow(new Object[] {7, null, UTF8String.fromString("dropped")});
    rows.row(row, new Kind[] {Kind.INT4, Kind.TEXT}, new DecimalType[2]);
    assertArrayEquals(
        expected(o -> { o.writeShort(2); o.writeInt(4); o.writeInt(7); o.writeInt(-1); }),
        written(rows));
    BinaryRows empty = new BinaryRows(1);
    empty.row(row, NONE, new DecimalType[0]);
    assertArrayEquals(new byte[] {0, 0}, written(empty));
  }
}

package dev.eo.writer.postgres;

import java.math.BigDecimal;
import java.math.BigInteger;
import dev.eo.writer.Kind;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Spark's internal rows in PostgreSQL's binary COPY format, into a growable buffer.
 *
 * <p>Why binary and why from {@code InternalRow}: the server parses no text, and the task
 * converts no value to an object (no Arrow hand-over, no Python worker); each value is copied
 * from Spark's row as the bytes PostgreSQL's receive function reads. The value kinds are the
 * pairs whose payload the target type reads as is; the driver checked the target column types
 * ({@code eo_jobs.runtime.jvm_writer}) and the task checks them again in its transaction.
 */
final class BinaryRows {
  /** Microseconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01 (UTC). */
  static final long PG_EPOCH_MICROS = 946_684_800_000_000L;
  /** A timestamp PostgreSQL's receive function refuses: not ±infinity, and before 4713 BC. */
  static final long OUT_OF_RANGE = Long.MIN_VALUE + 1;
  /** Days between 1970-01-01 and 2000-01-01. */
  static final int PG_EPOCH_DAYS = 10_957;
  private static final byte[] SIGNATURE = {
    'P', 'G', 'C', 'O', 'P', 'Y', '\n', (byte) 0xff, '\r', '\n', 0
  };

  byte[] bytes;
  int length;

  BinaryRows(int capacity) {
    bytes = new byte[capacity];
  }

  /** The file header: signature, flags (no OIDs), no header extension. */
  void header() {
    raw(SIGNATURE, SIGNATURE.length);
    int32(0);
    int32(0);
  }

  /** The file trailer: a field count of -1. */
  void trailer() {
    int16(-1);
  }

  /**
   * One row: its first {@code kinds.length} fields, each encoded as its kind says ({@code
   * decimals[i]}: the Spark type of a NUMERIC field, whose precision says how the row holds it).
   */
  void row(InternalRow row, Kind[] kinds, DecimalType[] decimals) {
    int16(kinds.length);
    for (int i = 0; i < kinds.length; i++) {
      if (row.isNullAt(i)) {
        int32(-1);
        continue;
      }
      switch (kinds[i]) {
        case INT8 -> { int32(8); int64(row.getLong(i)); }
        case INT4 -> { int32(4); int32(row.getInt(i)); }
        case INT2 -> { int32(2); int16(row.getShort(i)); }
        case BOOL -> { int32(1); ensure(1); bytes[length++] = (byte) (row.getBoolean(i) ? 1 : 0); }
        case FLOAT8 -> { int32(8); int64(Double.doubleToRawLongBits(row.getDouble(i))); }
        case FLOAT4 -> { int32(4); int32(Float.floatToRawIntBits(row.getFloat(i))); }
        case TEXT -> text(row.getUTF8String(i));
        case TIMESTAMP -> { int32(8); int64(pgMicros(row.getLong(i))); }
        case DATE -> { int32(4); int32(row.getInt(i) - PG_EPOCH_DAYS); }
        case NUMERIC -> numeric(
            row.getDecimal(i, decimals[i].precision(), decimals[i].scale()).toJavaBigDecimal());
        default -> throw new IllegalStateException("unknown kind " + kinds[i]);
      }
    }
  }

  /**
   * Microseconds since PostgreSQL's epoch. Within about 30 years of Spark's earliest instant
   * the difference would wrap to a valid timestamp near year 294247, stored silently; such an
   * instant is sent as {@link #OUT_OF_RANGE} instead, which PostgreSQL refuses (22008, as it
   * refuses anything before 4713 BC), so the row is a refused record, never a wrong value. So
   * is the one instant whose difference is exactly {@code Long.MIN_VALUE}, PostgreSQL's
   * -infinity.
   */
  static long pgMicros(long unixMicros) {
    if (unixMicros <= Long.MIN_VALUE + PG_EPOCH_MICROS) {
      return OUT_OF_RANGE;
    }
    return unixMicros - PG_EPOCH_MICROS;
  }

  /** The sign word of a negative numeric. */
  static final int NUMERIC_NEG = 0x4000;
  private static final BigInteger BASE = BigInteger.valueOf(10_000);

  /**
   * PostgreSQL's binary numeric: ndigits, weight (of the first base-10000 digit), sign, display
   * scale, then the digits. The unscaled value is padded with zeros to a scale that is a
   * multiple of 4, so every digit group falls on the decimal point; leading and trailing zero
   * groups are not sent (the display scale keeps the trailing zeros).
   */
  void numeric(BigDecimal value) {
    int dscale = Math.max(value.scale(), 0);
    int groups = (dscale + 3) / 4;
    BigInteger unscaled = value.setScale(groups * 4).unscaledValue();
    int sign = unscaled.signum() < 0 ? NUMERIC_NEG : 0;
    unscaled = unscaled.abs();
    java.util.ArrayList<Integer> digits = new java.util.ArrayList<>(); // least significant first
    while (unscaled.signum() > 0) {
      BigInteger[] qr = unscaled.divideAndRemainder(BASE);
      digits.add(qr[1].intValue());
      unscaled = qr[0];
    }
    int low = 0; // trailing zero groups: implied by the weight
    while (low < digits.size() && digits.get(low) == 0) low++;
    int n = digits.size() - low;
    int weight = n == 0 ? 0 : digits.size() - 1 - groups;
    int32(8 + 2 * n);
    int16(n);
    int16(weight);
    int16(n == 0 ? 0 : sign);
    int16(dscale);
    for (int i = digits.size() - 1; i >= low; i--) int16(digits.get(i));
  }

  /** The value of a binary numeric at {@code in}'s position (for a refused record's JSON). */
  static BigDecimal readNumeric(java.nio.ByteBuffer in) {
    int n = in.getShort();
    int weight = in.getShort();
    int sign = in.getShort() & 0xffff;
    int dscale = in.getShort();
    BigInteger unscaled = BigInteger.ZERO;
    for (int i = 0; i < n; i++) {
      unscaled = unscaled.multiply(BASE).add(BigInteger.valueOf(in.getShort()));
    }
    // The digits read are worth 10000^(weight - n + 1) each in the last place.
    BigDecimal value = new BigDecimal(unscaled).scaleByPowerOfTen(4 * (weight - n + 1));
    if (sign == NUMERIC_NEG) value = value.negate();
    return value.setScale(dscale, java.math.RoundingMode.UNNECESSARY);
  }

  private void text(UTF8String value) {
    int n = value.numBytes();
    int32(n);
    ensure(n);
    Platform.copyMemory(
        value.getBaseObject(), value.getBaseOffset(), bytes, Platform.BYTE_ARRAY_OFFSET + length, n);
    length += n;
  }

  void raw(byte[] source, int n) {
    raw(source, 0, n);
  }

  void raw(byte[] source, int offset, int n) {
    ensure(n);
    System.arraycopy(source, offset, bytes, length, n);
    length += n;
  }

  /** {@code n} bytes of {@code src} from index {@code start}, as they are. */
  void raw(java.nio.ByteBuffer src, int start, int n) {
    ensure(n);
    src.get(start, bytes, length, n);
    length += n;
  }

  void int16(int v) {
    ensure(2);
    bytes[length++] = (byte) (v >>> 8);
    bytes[length++] = (byte) v;
  }

  void int32(int v) {
    ensure(4);
    bytes[length++] = (byte) (v >>> 24);
    bytes[length++] = (byte) (v >>> 16);
    bytes[length++] = (byte) (v >>> 8);
    bytes[length++] = (byte) v;
  }

  void int64(long v) {
    int32((int) (v >>> 32));
    int32((int) v);
  }

  private void ensure(int n) {
    if (length + n > bytes.length) {
      bytes = java.util.Arrays.copyOf(bytes, Math.max(bytes.length * 2, length + n));
    }
  }
}

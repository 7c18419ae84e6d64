package dev.eo.writer;

import org.apache.spark.sql.catalyst.InternalRow;
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

  /** One row: its first {@code kinds.length} fields, each encoded as its kind says. */
  void row(InternalRow row, Kind[] kinds) {
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
        default -> throw new IllegalStateException("unknown kind " + kinds[i]);
      }
    }
  }

  /**
   * Microseconds since PostgreSQL's epoch. Within about 30 years of Spark's earliest instant
   * the difference would wrap to a valid timestamp near year 294247, stored silently; such an
   * instant is sent as {@link #OUT_OF_RANGE} instead, which PostgreSQL refuses (22008, as it
   * refuses anything before 4713 BC), so the row is a refused record, never a wrong value.
   */
  static long pgMicros(long unixMicros) {
    if (unixMicros < Long.MIN_VALUE + PG_EPOCH_MICROS) {
      return OUT_OF_RANGE;
    }
    return unixMicros - PG_EPOCH_MICROS;
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

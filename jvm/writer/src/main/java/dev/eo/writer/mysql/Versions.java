package dev.eo.writer.mysql;

import java.util.Arrays;
import org.apache.spark.sql.catalyst.InternalRow;

/**
 * The upsert's ordering rule between two rows of one key in a task ({@code upsert.winners}):
 * the incoming row wins when the held one's version is NULL, or when the incoming version is
 * not NULL and not lower. Versions compare as the Python values the Python path compares:
 * numbers by value, text by code point (UTF-8 bytes in order), bytes unsigned, dates and
 * timestamps by time.
 */
final class Versions {
  private Versions() {}

  static boolean incomingWins(Literals literals, InternalRow held, InternalRow incoming, int i) {
    if (held.isNullAt(i)) return true;
    if (incoming.isNullAt(i)) return false;
    Value kind = literals.kind(i);
    if (kind == Value.FLOAT) return held.getFloat(i) <= incoming.getFloat(i); // -0.0 == 0.0, NaN
    if (kind == Value.DOUBLE) return held.getDouble(i) <= incoming.getDouble(i);
    return compare(kind, literals, held, incoming, i) <= 0;
  }

  /** {@code held} against {@code incoming} at field {@code i} (both not NULL). */
  static int compare(Value kind, Literals literals, InternalRow held, InternalRow incoming, int i) {
    return switch (kind) {
      case BYTE -> Byte.compare(held.getByte(i), incoming.getByte(i));
      case SHORT -> Short.compare(held.getShort(i), incoming.getShort(i));
      case INT, DATE -> Integer.compare(held.getInt(i), incoming.getInt(i));
      case LONG, TIMESTAMP -> Long.compare(held.getLong(i), incoming.getLong(i));
      case BOOLEAN -> Boolean.compare(held.getBoolean(i), incoming.getBoolean(i));
      case FLOAT -> Float.compare(held.getFloat(i), incoming.getFloat(i));
      case DOUBLE -> Double.compare(held.getDouble(i), incoming.getDouble(i));
      case DECIMAL -> literals.decimal(held, i).compareTo(literals.decimal(incoming, i));
      case STRING -> held.getUTF8String(i).compareTo(incoming.getUTF8String(i));
      case BINARY -> Arrays.compareUnsigned(held.getBinary(i), incoming.getBinary(i));
      case NULL -> 0;
    };
  }
}

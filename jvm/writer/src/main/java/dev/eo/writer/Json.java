package dev.eo.writer;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.time.LocalDate;

/**
 * A refused row's dead letter {@code raw} as the Python writers write it ({@code
 * sinks.postgres.refusals.record_json}: {@code json.dumps(..., ensure_ascii=True)}): the same
 * text whichever writer refused the row, so one dead-letter table never holds two spellings of
 * one record.
 */
public final class Json {
  private static final char[] HEX = "0123456789abcdef".toCharArray();
  private static final long MICROS_PER_DAY = 86_400_000_000L;

  private Json() {}

  /**
   * {@code text} as a JSON string, as Python's {@code json.dumps} with {@code ensure_ascii}
   * writes it: quote, backslash and the short escapes ({@code \b \f \n \r \t}), anything else
   * outside printable ASCII as {@code \\uXXXX} (UTF-16 units, as Python writes a surrogate pair).
   */
  public static void quote(StringBuilder out, String text) {
    out.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        case '\b' -> out.append("\\b");
        case '\f' -> out.append("\\f");
        default -> {
          if (c < 0x20 || c > 0x7e) {
            out.append("\\u")
                .append(HEX[(c >> 12) & 15])
                .append(HEX[(c >> 8) & 15])
                .append(HEX[(c >> 4) & 15])
                .append(HEX[c & 15]);
          } else {
            out.append(c);
          }
        }
      }
    }
    out.append('"');
  }

  /** A float as Python's JSON has it: {@code repr}, and a NaN or infinity as its quoted text. */
  public static void number(StringBuilder out, double value) {
    if (Double.isNaN(value)) {
      quote(out, "nan");
    } else if (Double.isInfinite(value)) {
      quote(out, value > 0 ? "inf" : "-inf");
    } else {
      out.append(pythonRepr(value));
    }
  }

  /**
   * Python's {@code repr} of a finite double: the shortest decimal that reads back as the same
   * double (the nearest one when several are as short), fixed notation for a decimal exponent
   * from -4 to 15 ({@code 0.0001}, {@code 1e+16}, {@code 1.5e-05}, {@code 100.0}).
   */
  public static String pythonRepr(double value) {
    if (value == 0) {
      return (1 / value < 0) ? "-0.0" : "0.0";
    }
    BigDecimal exact = new BigDecimal(value);
    BigDecimal shortest = exact;
    for (int digits = 1; digits <= 17; digits++) {
      BigDecimal rounded = exact.round(new MathContext(digits, RoundingMode.HALF_EVEN));
      if (rounded.doubleValue() == value) {
        shortest = rounded;
        break;
      }
    }
    String sign = shortest.signum() < 0 ? "-" : "";
    BigDecimal magnitude = shortest.abs().stripTrailingZeros();
    String digits = magnitude.unscaledValue().toString();
    // value = 0.digits * 10^point
    int point = digits.length() - magnitude.scale();
    StringBuilder out = new StringBuilder(sign);
    if (point <= -4 || point > 16) {
      out.append(digits.charAt(0));
      if (digits.length() > 1) out.append('.').append(digits, 1, digits.length());
      int exponent = point - 1;
      out.append('e').append(exponent < 0 ? '-' : '+');
      int abs = Math.abs(exponent);
      if (abs < 10) out.append('0');
      out.append(abs);
    } else if (point <= 0) {
      out.append("0.");
      for (int i = 0; i < -point; i++) out.append('0');
      out.append(digits);
    } else if (point >= digits.length()) {
      out.append(digits);
      for (int i = digits.length(); i < point; i++) out.append('0');
      out.append(".0");
    } else {
      out.append(digits, 0, point).append('.').append(digits, point, digits.length());
    }
    return out.toString();
  }

  /** A date as Python's {@code date.isoformat()}. */
  public static String date(int epochDay) {
    StringBuilder out = new StringBuilder(10);
    date(out, LocalDate.ofEpochDay(epochDay));
    return out.toString();
  }

  /**
   * A timestamp (microseconds since 1970, read as a UTC wall time) as Python's naive {@code
   * datetime.isoformat()}: {@code 2024-01-02T03:04:05}, with {@code .ffffff} only when the
   * microseconds are not zero.
   */
  public static String timestamp(long micros) {
    StringBuilder out = new StringBuilder(26);
    wallTime(out, micros, 'T', false);
    return out.toString();
  }

  /**
   * {@code YYYY-MM-DD<sep>HH:MM:SS[.ffffff]} of a UTC wall time; the fraction always when
   * {@code fraction}, else only when not zero. Years outside 0 to 9999 as Java writes them
   * (no database takes them; the server refuses the row).
   */
  public static void wallTime(StringBuilder out, long micros, char separator, boolean fraction) {
    long day = Math.floorDiv(micros, MICROS_PER_DAY);
    long inDay = Math.floorMod(micros, MICROS_PER_DAY);
    date(out, LocalDate.ofEpochDay(day));
    out.append(separator);
    long seconds = inDay / 1_000_000;
    int micro = (int) (inDay % 1_000_000);
    two(out, (int) (seconds / 3600));
    out.append(':');
    two(out, (int) (seconds / 60 % 60));
    out.append(':');
    two(out, (int) (seconds % 60));
    if (fraction || micro != 0) {
      out.append('.');
      String text = Integer.toString(micro);
      for (int i = text.length(); i < 6; i++) out.append('0');
      out.append(text);
    }
  }

  /** {@code YYYY-MM-DD}, the year zero-padded to four digits as Python and MySQL write it. */
  public static void date(StringBuilder out, LocalDate date) {
    int year = date.getYear();
    if (year >= 0 && year <= 9999) {
      String text = Integer.toString(year);
      for (int i = text.length(); i < 4; i++) out.append('0');
      out.append(text);
    } else {
      out.append(year);
    }
    out.append('-');
    two(out, date.getMonthValue());
    out.append('-');
    two(out, date.getDayOfMonth());
  }

  private static void two(StringBuilder out, int value) {
    if (value < 10) out.append('0');
    out.append(value);
  }
}

package dev.eo.writer;

import java.util.Set;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * A Spark type whose value {@link BinaryRows} encodes as the binary payload of the PostgreSQL
 * types it names: the target column's receive function reads it as is. The pairs are those of
 * the Python writer's binary path ({@code arrow_copy.BINARY_TARGETS}); any other column sends
 * the sink's batch to the Python writer.
 */
public enum Kind {
  INT8(Set.of("int8")),
  INT4(Set.of("int4")),
  INT2(Set.of("int2")),
  BOOL(Set.of("bool")),
  FLOAT8(Set.of("float8")),
  FLOAT4(Set.of("float4")),
  TEXT(Set.of("text", "varchar")),
  /**
   * Microseconds since 2000-01-01 for both: a Spark TIMESTAMP is an instant (UTC), so a
   * timestamptz gets the instant and a timestamp its UTC wall time; a TIMESTAMP_NTZ wall time
   * lands as itself; what CSV gives with TimeZone UTC.
   */
  TIMESTAMP(Set.of("timestamp", "timestamptz")),
  DATE(Set.of("date")),
  /**
   * A Spark DECIMAL(p, s) as PostgreSQL's numeric: base-10000 digits, exact (running totals of
   * money land in numeric; a double would round them).
   */
  NUMERIC(Set.of("numeric"));

  final Set<String> accepted;

  Kind(Set<String> accepted) {
    this.accepted = accepted;
  }

  /** Whether a column of type {@code typname} reads this kind; a missing column (null) does not. */
  public boolean accepts(String typname) {
    // Set.of(...).contains(null) throws NullPointerException rather than answering.
    return typname != null && accepted.contains(typname);
  }

  /** The kind of a Spark type, or null when there is none. */
  public static Kind of(DataType type) {
    if (type instanceof LongType) return INT8;
    if (type instanceof IntegerType) return INT4;
    if (type instanceof ShortType) return INT2;
    if (type instanceof BooleanType) return BOOL;
    if (type instanceof DoubleType) return FLOAT8;
    if (type instanceof FloatType) return FLOAT4;
    if (type instanceof StringType) return TEXT;
    if (type instanceof TimestampType || type instanceof TimestampNTZType) return TIMESTAMP;
    if (type instanceof DateType) return DATE;
    if (type instanceof DecimalType) return NUMERIC;
    return null;
  }
}

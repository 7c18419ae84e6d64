package dev.eo.writer.mysql;

import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.NullType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * A Spark type the MySQL writer tasks write as a literal ({@link Literals}): every type the
 * Python writer writes ({@code sinks.mysql.literals}, {@code arrow_literals}). Any other
 * (arrays, maps, structs, intervals, times) sends the batch to the Python writer, which
 * refuses it there with its own words.
 */
public enum Value {
  BYTE,
  SHORT,
  INT,
  LONG,
  BOOLEAN,
  FLOAT,
  DOUBLE,
  DECIMAL,
  STRING,
  BINARY,
  DATE,
  /** A Spark TIMESTAMP (an instant) as its UTC wall time, a TIMESTAMP_NTZ as itself. */
  TIMESTAMP,
  /** A column of NULLs only (Spark's NullType, {@code lit(None)}). */
  NULL;

  /** The value kind of a Spark type, or null when the tasks do not write it. */
  public static Value of(DataType type) {
    if (type instanceof ByteType) return BYTE;
    if (type instanceof ShortType) return SHORT;
    if (type instanceof IntegerType) return INT;
    if (type instanceof LongType) return LONG;
    if (type instanceof BooleanType) return BOOLEAN;
    if (type instanceof FloatType) return FLOAT;
    if (type instanceof DoubleType) return DOUBLE;
    if (type instanceof DecimalType) return DECIMAL;
    if (type instanceof StringType) return STRING;
    if (type instanceof BinaryType) return BINARY;
    if (type instanceof DateType) return DATE;
    if (type instanceof TimestampType || type instanceof TimestampNTZType) return TIMESTAMP;
    if (type instanceof NullType) return NULL;
    return null;
  }
}

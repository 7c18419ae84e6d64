package dev.eo.writer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.junit.jupiter.api.Test;

class KindTest {
  @Test
  void eachSparkTypeWithABinaryFormHasItsKind() {
    Map<DataType, Kind> kinds = new LinkedHashMap<>();
    kinds.put(DataTypes.LongType, Kind.INT8);
    kinds.put(DataTypes.IntegerType, Kind.INT4);
    kinds.put(DataTypes.ShortType, Kind.INT2);
    kinds.put(DataTypes.BooleanType, Kind.BOOL);
    kinds.put(DataTypes.DoubleType, Kind.FLOAT8);
    kinds.put(DataTypes.FloatType, Kind.FLOAT4);
    kinds.put(DataTypes.StringType, Kind.TEXT);
    kinds.put(DataTypes.TimestampType, Kind.TIMESTAMP);
    kinds.put(DataTypes.TimestampNTZType, Kind.TIMESTAMP);
    kinds.put(DataTypes.DateType, Kind.DATE);
    kinds.put(new DecimalType(38, 10), Kind.NUMERIC);
    kinds.forEach((type, kind) -> assertEquals(kind, Kind.of(type), type.simpleString()));
  }

  @Test
  void aSparkTypeWithoutOneHasNone() {
    for (DataType type :
        new DataType[] {
          DataTypes.BinaryType,
          DataTypes.ByteType,
          DataTypes.NullType,
          DataTypes.createArrayType(DataTypes.LongType),
          DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType),
          DataTypes.CalendarIntervalType,
        }) {
      assertNull(Kind.of(type), type.simpleString());
    }
  }

  @Test
  void aKindFillsOnlyTheColumnTypesThatReadItsPayloadAsIs() {
    Map<Kind, Set<String>> reads =
        Map.of(
            Kind.INT8, Set.of("int8"),
            Kind.INT4, Set.of("int4"),
            Kind.INT2, Set.of("int2"),
            Kind.BOOL, Set.of("bool"),
            Kind.FLOAT8, Set.of("float8"),
            Kind.FLOAT4, Set.of("float4"),
            Kind.TEXT, Set.of("text", "varchar"),
            Kind.TIMESTAMP, Set.of("timestamp", "timestamptz"),
            Kind.DATE, Set.of("date"),
            Kind.NUMERIC, Set.of("numeric"));
    assertEquals(Set.of(Kind.values()), reads.keySet());
    Set<String> all =
        Set.of(
            "int8", "int4", "int2", "bool", "float8", "float4", "text", "varchar", "timestamp",
            "timestamptz", "date", "numeric", "jsonb", "bpchar", "uuid", "bytea", "time");
    for (Kind kind : Kind.values()) {
      for (String typname : all) {
        assertEquals(reads.get(kind).contains(typname), kind.accepts(typname), kind + " " + typname);
      }
      assertFalse(kind.accepts(null), kind + " into a missing column");
    }
    assertTrue(Kind.TEXT.accepts("varchar"));
  }
}

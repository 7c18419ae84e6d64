package dev.eo.writer;

import java.util.Iterator;
import java.util.List;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StructField;

/**
 * The entry point the driver calls through Py4J: one sink's writer job for one micro-batch.
 *
 * <p>Each partition of {@code frame} is one writer task of the sink's database kind ({@link
 * dev.eo.writer.postgres.TaskWriter}: binary COPY and PREPARE TRANSACTION; {@link
 * dev.eo.writer.mysql.TaskWriter}: multi-row INSERTs in an XA branch) over Spark's internal
 * rows: no Arrow conversion, no Python worker. It returns one line per task, {@code gid TAB
 * rows TAB dead letters} ({@link Tasks#line}), for the driver's decision; or, writing nothing,
 * one line {@code unfit TAB reason} when the batch is not the tasks' to write ({@link Unfit}:
 * the driver then writes it through the Python writer).
 */
public final class PreparedCopy {
  /** The first and only line of a refusal: the frame has a column the tasks cannot carry. */
  public static final String UNFIT = "unfit\t";

  private PreparedCopy() {}

  public static String[] run(Dataset<Row> frame, String specJson) throws java.io.IOException {
    Spec spec = Spec.parse(specJson);
    StructField[] fields = frame.schema().fields();
    for (int i = 0; i < spec.columns.size(); i++) {
      String column = spec.columns.get(i);
      if (i >= fields.length || !fields[i].name().equals(column)) {
        throw new IllegalArgumentException("the frame's column " + i + " is not " + column);
      }
    }
    Function2<Integer, Iterator<InternalRow>, Iterator<String>> tasks;
    try {
      tasks = switch (spec.kind) {
        case Spec.POSTGRESQL -> postgres(spec, fields);
        case Spec.MYSQL -> mysql(spec, fields);
        default -> throw new IllegalArgumentException("no writer tasks for kind " + spec.kind);
      };
    } catch (Unfit unfit) {
      return new String[] {UNFIT + unfit.getMessage()};
    }
    List<String> results =
        frame
            .queryExecution()
            .toRdd()
            .toJavaRDD()
            .mapPartitionsWithIndex(tasks, false)
            .collect();
    return results.toArray(new String[0]);
  }

  private static Function2<Integer, Iterator<InternalRow>, Iterator<String>> postgres(
      Spec spec, StructField[] fields) throws Unfit {
    Kind[] kinds = new Kind[spec.columns.size()];
    DecimalType[] decimals = new DecimalType[kinds.length];
    for (int i = 0; i < kinds.length; i++) {
      String column = spec.columns.get(i);
      kinds[i] = Kind.of(fields[i].dataType());
      if (fields[i].dataType() instanceof DecimalType decimal) decimals[i] = decimal;
      String target = spec.targetTypes.get(column);
      if (kinds[i] == null || !kinds[i].accepts(target)) {
        throw new Unfit(
            "column " + column + ": Spark " + fields[i].dataType().simpleString()
                + " into " + target + " has no binary COPY form");
      }
    }
    return new dev.eo.writer.postgres.TaskWriter(spec, kinds, decimals);
  }

  private static Function2<Integer, Iterator<InternalRow>, Iterator<String>> mysql(
      Spec spec, StructField[] fields) throws Unfit {
    try {
      Class.forName("org.mariadb.jdbc.Driver", false, PreparedCopy.class.getClassLoader());
    } catch (ClassNotFoundException e) {
      throw new Unfit("MariaDB Connector/J (org.mariadb.jdbc.Driver) is not on Spark's class path");
    }
    return dev.eo.writer.mysql.TaskWriter.of(spec, fields);
  }
}

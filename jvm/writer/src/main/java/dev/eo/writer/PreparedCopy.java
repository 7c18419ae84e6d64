package dev.eo.writer;

import dev.eo.writer.postgres.TaskWriter;
import java.util.List;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StructField;

/**
 * The entry point the driver calls through Py4J: one sink's writer job for one micro-batch.
 *
 * <p>Each partition of {@code frame} is one writer task ({@link TaskWriter}) over Spark's
 * internal rows: no Arrow conversion, no Python worker. It returns one line per task, {@code
 * gid TAB rows TAB dead letters}, for the driver's decision; or, writing nothing, one line
 * {@code unfit TAB reason} when a column has no binary form its target reads (the driver then
 * writes the batch through the Python writer).
 */
public final class PreparedCopy {
  /** The first and only line of a refusal: the frame has a column binary COPY cannot carry. */
  public static final String UNFIT = "unfit\t";

  private PreparedCopy() {}

  public static String[] run(Dataset<Row> frame, String specJson) throws java.io.IOException {
    Spec spec = Spec.parse(specJson);
    StructField[] fields = frame.schema().fields();
    Kind[] kinds = new Kind[spec.columns.size()];
    DecimalType[] decimals = new DecimalType[kinds.length];
    for (int i = 0; i < kinds.length; i++) {
      String column = spec.columns.get(i);
      if (i >= fields.length || !fields[i].name().equals(column)) {
        throw new IllegalArgumentException("the frame's column " + i + " is not " + column);
      }
      kinds[i] = Kind.of(fields[i].dataType());
      if (fields[i].dataType() instanceof DecimalType decimal) decimals[i] = decimal;
      String target = spec.targetTypes.get(column);
      if (kinds[i] == null || !kinds[i].accepts(target)) {
        return new String[] {
          UNFIT + "column " + column + ": Spark " + fields[i].dataType().simpleString()
              + " into " + target + " has no binary COPY form"
        };
      }
    }
    List<String> results =
        frame
            .queryExecution()
            .toRdd()
            .toJavaRDD()
            .mapPartitionsWithIndex(new TaskWriter(spec, kinds, decimals), false)
            .collect();
    return results.toArray(new String[0]);
  }
}

package dev.eo.writer.mysql;

import dev.eo.writer.Spec;
import dev.eo.writer.Tasks;
import dev.eo.writer.Unfit;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StructField;

/**
 * One MySQL/MariaDB writer task: its partition's rows in one XA branch of its own connection
 * ({@link Branch}), prepared under the xid of its gid (or committed), the connection closed
 * right after (a prepared branch stays bound to it until then), then the crash point and the
 * task's line, as every kind's task ({@link Tasks}).
 */
public final class TaskWriter
    implements Function2<Integer, Iterator<InternalRow>, Iterator<String>> {
  private static final long serialVersionUID = 1L;

  private final Spec spec;
  private final Value[] values;
  private final DecimalType[] decimals;

  private TaskWriter(Spec spec, Value[] values, DecimalType[] decimals) {
    this.spec = spec;
    this.values = values;
    this.decimals = decimals;
  }

  /** The tasks of a frame whose first fields are the written columns; {@link Unfit} when a
   * column is of a type the tasks do not write (the Python writer decides about it). */
  public static TaskWriter of(Spec spec, StructField[] fields) throws Unfit {
    Value[] values = new Value[spec.columns.size()];
    DecimalType[] decimals = new DecimalType[values.length];
    for (int i = 0; i < values.length; i++) {
      values[i] = Value.of(fields[i].dataType());
      if (values[i] == null) {
        throw new Unfit("column " + spec.columns.get(i) + ": Spark "
            + fields[i].dataType().simpleString() + " has no MySQL literal here");
      }
      if (fields[i].dataType() instanceof DecimalType decimal) decimals[i] = decimal;
    }
    return new TaskWriter(spec, values, decimals);
  }

  @Override
  public Iterator<String> call(Integer partition, Iterator<InternalRow> rows) throws Exception {
    TaskContext context = TaskContext.get();
    long attempt = context.taskAttemptId();
    String gid = Tasks.gid(spec.gidPrefix, partition, attempt);
    String xid = Xa.xid(spec.mysql, partition, attempt);
    long[] written;
    try (Connection conn = Connections.open(spec); Statement statement = conn.createStatement()) {
      Branch.Server server =
          new Branch.Server() {
            @Override
            public void execute(String sql) throws SQLException {
              statement.execute(sql);
            }

            @Override
            public boolean anyRow(String sql) throws SQLException {
              try (ResultSet rs = statement.executeQuery(sql)) {
                return rs.next();
              }
            }
          };
      written =
          new Branch(spec, new Literals(spec.columns, values, decimals), server)
              .write(gid, xid, rows);
    }
    Tasks.afterPrepared(spec, partition, context.attemptNumber());
    return List.of(Tasks.line(gid, written[0], written[1])).iterator();
  }
}

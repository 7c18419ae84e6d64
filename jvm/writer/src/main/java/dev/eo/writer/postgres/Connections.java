package dev.eo.writer.postgres;

import java.sql.Connection;
import java.sql.SQLException;
import dev.eo.writer.Spec;
import java.util.Properties;

/**
 * A writer task's connection, opened patiently as {@code connect_patiently} does: a task that
 * starts while its server restarts waits for it rather than failing, since Spark's few quick
 * retries would all land in the same gap.
 */
final class Connections {
  private Connections() {}

  static Connection open(Spec spec) throws SQLException, InterruptedException {
    Properties properties = new Properties();
    properties.putAll(spec.properties);
    // The driver is called directly: DriverManager looks drivers up by the caller's class
    // loader, which is not the one Spark loads a job's jars with.
    org.postgresql.Driver driver = new org.postgresql.Driver();
    long deadline = System.nanoTime() + (long) (spec.reopenSeconds * 1e9);
    long pauseMs = 200;
    while (true) {
      try {
        Connection conn = driver.connect(spec.url, properties);
        if (conn == null) {
          throw new SQLException("pgJDBC does not accept the URL " + spec.url);
        }
        return conn;
      } catch (SQLException e) {
        if (!refused(e) || System.nanoTime() + pauseMs * 1_000_000 > deadline) {
          throw e;
        }
        Thread.sleep(pauseMs);
        pauseMs = Math.min(pauseMs * 2, 5_000);
      }
    }
  }

  /** Connection failures (class 08) and "the database system is starting up" (57P03). */
  private static boolean refused(SQLException e) {
    String state = e.getSQLState();
    return state != null && (state.startsWith("08") || state.equals("57P03"));
  }
}

package dev.eo.writer.mysql;

import dev.eo.writer.Spec;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.Properties;

/**
 * A writer task's connection through MariaDB Connector/J, as {@code mysql_xa.connect} opens
 * one (utf8mb4, TCP, the DSN's database, {@code CONNECT_TIMEOUT}), and patiently as {@code
 * connect_patiently}: a task that starts while its server restarts waits for it.
 */
final class Connections {
  private Connections() {}

  static Connection open(Spec spec) throws SQLException, InterruptedException {
    Spec.MySql my = spec.mysql;
    Properties properties = new Properties();
    properties.setProperty("user", my.user);
    properties.setProperty("password", my.password);
    properties.setProperty("connectTimeout", Integer.toString(my.connectTimeoutSeconds * 1000));
    properties.setProperty("tcpKeepAlive", "true");
    // MySQL 8's caching_sha2_password without TLS: fetch the server's RSA key, as PyMySQL does.
    properties.setProperty("allowPublicKeyRetrieval", "true");
    String host = my.host.contains(":") ? "[" + my.host + "]" : my.host;
    // The database is chosen by USE below, quoted: a URL would need it escaped its own way.
    String url = "jdbc:mariadb://" + host + ":" + my.port + "/";
    // The driver is called directly: DriverManager looks drivers up by the caller's class
    // loader, which is not the one Spark loads a job's jars with.
    org.mariadb.jdbc.Driver driver = new org.mariadb.jdbc.Driver();
    long deadline = System.nanoTime() + (long) (spec.reopenSeconds * 1e9);
    long pauseMs = 200;
    while (true) {
      try {
        Connection conn = driver.connect(url, properties);
        if (conn == null) throw new SQLException("Connector/J does not accept the URL " + url);
        try (java.sql.Statement use = conn.createStatement()) {
          use.execute("USE `" + my.database.replace("`", "``") + "`");
        } catch (SQLException e) {
          conn.close();
          throw e;
        }
        return conn;
      } catch (SQLException e) {
        if (!refused(e) || System.nanoTime() + pauseMs * 1_000_000 > deadline) throw e;
        Thread.sleep(pauseMs);
        pauseMs = Math.min(pauseMs * 2, 5_000);
      }
    }
  }

  /** A connection that failed or was lost (SQLSTATE class 08), as {@code LOST_CONNECTION}. */
  private static boolean refused(SQLException e) {
    String state = e.getSQLState();
    return state != null && state.startsWith("08");
  }
}

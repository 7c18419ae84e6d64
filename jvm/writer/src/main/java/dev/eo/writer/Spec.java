package dev.eo.writer;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.util.List;
import java.util.Map;

/**
 * One sink's writer tasks for one micro-batch, as the driver describes them (JSON, built by
 * {@code eo_jobs.runtime.jvm_writer} from the sink kind's part, {@code sinks.*.jvm}). Every SQL
 * text in it was composed on the driver, identifiers quoted there (by psycopg for PostgreSQL, by
 * {@code sinks.mysql.identifiers} for MySQL); the tasks add only values.
 *
 * <p>The fields of no database ({@code kind}, {@code columns}, the gid prefix, the batch, the
 * fault, the dead-letter columns) are read by every kind's tasks; the flat SQL fields are
 * PostgreSQL's, {@link #mysql} is MySQL's.
 */
public final class Spec implements Serializable {
  private static final long serialVersionUID = 1L;
  /** Stands for the task's own staging table name suffix in an upsert's statements. */
  public static final String STAGE = "@@STAGE@@";
  public static final String POSTGRESQL = "postgresql";
  public static final String MYSQL = "mysql";
  private static final ObjectMapper JSON =
      new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, true);

  /** The sink database's kind ({@code sinks.kinds}): {@link #POSTGRESQL} or {@link #MYSQL}. */
  public String kind = POSTGRESQL;
  /** A MySQL/MariaDB sink's part (null for PostgreSQL). */
  public MySql mysql;
  /** {@code jdbc:postgresql://host:port/dbname}. */
  public String url;
  /** pgJDBC connection properties: user, password, sslmode, timeouts. */
  public Map<String, String> properties;
  /** {@code COPY table (columns) FROM STDIN (FORMAT binary)}; for an upsert, into the stage. */
  public String copySql;
  /** An upsert's staging table: create it, merge it into the table, drop it (null: append).
   * These and {@link #copySql} name the stage with {@link #STAGE}, which each task replaces. */
  public String stageSql;
  public String mergeSql;
  public String dropSql;
  /** The transaction's settings; parameter: lock_timeout in ms ({@code SESSION_SQL}). */
  public String sessionSql;
  /** The table's (column, typname) rows; parameter: the table ({@code COLUMN_TYPES_SQL}). */
  public String typesSql;
  /** The participant's marker; parameters: gid, pipeline, batch, rows ({@code MARKER_SQL}). */
  public String markerSql;
  /** The target table as {@code regclass} text, for the column type check. */
  public String table;
  /** The written columns, in the frame's order (its first {@code columns.size()} fields). */
  public List<String> columns;
  /** The target's column types ({@code pg_type.typname}) as the driver read them. */
  public Map<String, String> targetTypes;
  /** Frame ordinal of the dead-letter reason column; -1 when the frame has none. */
  public int reasonIndex = -1;
  /** Frame ordinal of the dead-letter raw text column; -1 when the frame has none. */
  public int rawIndex = -1;
  /** {@code COPY dead-letter table (pipeline, batch_id, raw, reason) FROM STDIN}; null: this
   * sink's tasks drop dead letters (another sink's tasks write them). */
  public String deadLetterSql;
  /** Empties an upsert's staging table after a piece was merged (the slow path). */
  public String clearSql;
  /** The target table as the dead letters name it ({@code schema.table}). */
  public String tableName;
  /** {@code COPY dead-letter table (pipeline, batch_id, raw, reason) FROM STDIN} in this
   * sink's database, for records the table refuses; null: such a record fails the task. */
  public String refusedSql;
  /** That dead-letter table as {@code regclass} text, for {@code to_regclass}. */
  public String refusedTable;
  /** Creates that table when {@code to_regclass} does not find it. */
  public String refusedCreateSql;
  /** How much of a task's COPY payload {@link Refusals.Kept} holds in memory; the rest spills. */
  public long keptMemoryBytes;
  /** {@code eo1:pipeline:query:sink:epoch:batch:}, the gid without task and attempt. */
  public String gidPrefix;
  /** Prepare (exactly-once) or commit (at-least-once). */
  public boolean twoPhase;
  public String pipeline;
  public long batchId;
  public int lockTimeoutMs;
  /** How long a refused connect is retried (a server restarting). */
  public double reopenSeconds;
  /** The armed fault at {@code after-some-prepared} for this batch: kill, stop, raise or null. */
  public String fault;
  /** The process the fault signals (the Python driver). */
  public long driverPid;

  /**
   * A MySQL/MariaDB sink's writer tasks ({@code eo_jobs.sinks.mysql.jvm}): where, the session,
   * the statements' fixed parts and the branch's xid, each from the Python writer's own
   * definitions ({@code sinks.mysql.writer}, {@code protocol.mysql_xa}), so both paths write
   * the same branch.
   */
  public static final class MySql implements Serializable {
    private static final long serialVersionUID = 1L;
    public String host;
    public int port;
    public String user;
    public String password;
    public String database;
    /** {@code mysql_xa.CONNECT_TIMEOUT}, seconds. */
    public int connectTimeoutSeconds;
    /** {@code writer.SESSION_SQL} with its three parameters (PyMySQL's {@code %s}). */
    public String sessionSql;
    public String sqlMode;
    public int lockWaitTimeoutSeconds;
    public int sessionWaitTimeoutSeconds;
    /** {@code INSERT INTO t (c1, c2) VALUES } and an upsert's {@code ON DUPLICATE KEY UPDATE}. */
    public String insertPrefix;
    public String insertSuffix = "";
    public int chunkRows;
    public int statementChars;
    /** {@code mysql_xa.MARKER_SQL}: parameters gid, pipeline, batch, rows. */
    public String markerSql;
    /** The xid of the gid ({@code mysql_xa.xid_of}) but the task's own part: gtrid, the bqual's
     * head (sink token, epoch) and tail (database tag), hex; the task puts its partition and
     * attempt (8 bytes each, big-endian) between head and tail. */
    public String gtrid;
    public String bqualHead;
    public String bqualTail;
    public long formatId;
    /** The dead-letter table (quoted) the branch writes letters into; null: none. */
    public String deadLetterTable;
    /** Finds it: a row when it exists ({@code dead_letters.ensure_dead_letter_table}, its two
     * parameters already in). */
    public String deadLetterExistsSql;
    /** Makes it ({@code DEAD_LETTER_DDL}), before the branch. */
    public String deadLetterDdl;
    /** {@code INSERT INTO dl (pipeline, batch_id, raw, reason) VALUES }. */
    public String deadLetterInsertPrefix;
    /** This sink's tasks write the batch's own dead letters (the first sink's). */
    public boolean batchDeadLetters;
    /** Refused rows become dead letters ({@code onRefusedRecord: deadLetter}); else they fail
     * the task naming the batch. */
    public boolean refusedToDeadLetters;
    /** {@code refusals.REFUSAL_CODES}: the error numbers of a value or row the table refuses. */
    public Map<Integer, String> refusalCodes;
    /** An upsert's key columns and version column, as frame ordinals (-1: none). */
    public List<Integer> keyIndexes = List.of();
    public int versionIndex = -1;
  }

  static Spec parse(String json) throws java.io.IOException {
    return JSON.readValue(json, Spec.class);
  }
}

package dev.eo.writer;

import java.io.IOException;
import java.util.regex.Pattern;

/**
 * What every database's writer task does alike: its gid, the crash point after its prepare,
 * and the line it hands back to the driver ({@code gid TAB rows TAB dead letters}).
 */
public final class Tasks {
  private static final Pattern GID = Pattern.compile("[a-z0-9:-]{1,199}");

  private Tasks() {}

  /**
   * The task's gid: the driver's prefix ({@code eo1:pipeline:query:sink:epoch:batch:}), the
   * partition and Spark's task attempt id. Refused unless it is of the characters and length a
   * gid may have ({@code eo_jobs.protocol.gid}), so it can stand as a SQL literal unescaped.
   */
  public static String gid(String prefix, int partition, long attemptId) {
    return checked(prefix + partition + ":" + attemptId);
  }

  /** {@code gid} itself, refused unless it has only a gid's characters and length. */
  public static String checked(String gid) {
    if (!GID.matcher(gid).matches()) {
      throw new IllegalArgumentException("not a gid: " + gid);
    }
    return gid;
  }

  /**
   * The crash point {@code after-some-prepared}: the first task (partition 0), once its
   * participant is prepared, runs the armed fault ({@link Faults}).
   */
  public static void afterPrepared(Spec spec, int partition, int attemptNumber)
      throws IOException, InterruptedException {
    if (partition == 0 && spec.fault != null) {
      Faults.inject(spec, attemptNumber == 0);
    }
  }

  /** The task's line for the driver's decision. */
  public static String line(String gid, long rows, long deadLetters) {
    return gid + "\t" + rows + "\t" + deadLetters;
  }
}

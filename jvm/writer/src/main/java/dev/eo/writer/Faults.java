package dev.eo.writer;

import java.io.IOException;

/**
 * The crash point {@code after-some-prepared} ({@code eo_jobs.protocol.faults}): after the
 * first task's participant is prepared, SIGKILL (kill) or SIGSTOP (stop) the driver, or fail
 * the task's first attempt (raise). The driver reads the armed fault when the batch's writer
 * job starts and puts it in the spec.
 */
public final class Faults {
  private Faults() {}

  public static void inject(Spec spec, boolean firstAttempt) throws IOException, InterruptedException {
    switch (spec.fault) {
      case "raise" -> {
        if (firstAttempt) {
          throw new RuntimeException(
              "fault injected at after-some-prepared of batch " + spec.batchId);
        }
      }
      case "kill" -> signal("KILL", spec.driverPid);
      case "stop" -> signal("STOP", spec.driverPid);
      default -> throw new IllegalArgumentException("unknown fault action " + spec.fault);
    }
  }

  private static void signal(String name, long pid) throws IOException, InterruptedException {
    // The shell's kill builtin: the JDK sends only SIGTERM and SIGKILL, and not every image
    // has a kill program.
    new ProcessBuilder("sh", "-c", "kill -" + name + " " + pid).inheritIO().start().waitFor();
  }
}

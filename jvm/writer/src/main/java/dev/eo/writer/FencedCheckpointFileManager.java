package dev.eo.writer;

import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;

/**
 * Spark's checkpoint writer, fenced by eo's epoch.
 *
 * <p>A driver frozen past its recovery (a zombie) resumes where it stopped: its stream plans
 * the next batch and writes {@code offsets/N} (and the file source's log) before any eo code
 * runs, so it could take a batch id the live driver is about to write, and the live driver's
 * query failed with "Concurrent update to the log". The sink fence stops a zombie only at its
 * decision. So each driver records its epoch in the checkpoint's fence folder ({@code
 * eo-fence/<epoch>}, an empty file created by {@link #claim} after the sink fence was raised;
 * creating a file is atomic where rewriting one is not) and every log file a driver creates
 * first lists that folder: a higher epoch there means this driver was replaced, and the write is
 * refused before anything is created. The check and the write are not one atomic step; a zombie
 * frozen exactly between them (microseconds) can still collide, and then the live driver's query
 * fails and is restarted by the operator as before.
 *
 * <p>Everything else is the checkpoint manager Spark would have used ({@code
 * eo.checkpoint.delegate}).
 */
public final class FencedCheckpointFileManager implements CheckpointFileManager {
  /** Hadoop configuration key: the epoch of this driver. */
  public static final String EPOCH_KEY = "eo.checkpoint.epoch";
  /** Hadoop configuration key: the fence folder's location. */
  public static final String FENCE_KEY = "eo.checkpoint.fence";
  /** Hadoop configuration key: the checkpoint manager class that does the work. */
  public static final String DELEGATE_KEY = "eo.checkpoint.delegate";
  /** Start of the message of a refused write, which the driver maps to its fenced exit. */
  public static final String FENCED = "eo: checkpoint fenced";

  private static final String FILE_CONTEXT_MANAGER =
      "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager";
  private static final String FILE_SYSTEM_MANAGER =
      "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager";

  private final CheckpointFileManager delegate;
  private final long epoch;
  private final Path fence;
  private final Configuration conf;

  public FencedCheckpointFileManager(Path path, Configuration conf) throws IOException {
    this.conf = conf;
    this.delegate = delegate(path, conf);
    this.epoch = conf.getLong(EPOCH_KEY, -1L);
    String location = conf.get(FENCE_KEY);
    if (epoch < 0 || location == null) {
      throw new IOException(
          "eo: " + EPOCH_KEY + " and " + FENCE_KEY + " must be set with this checkpoint manager");
    }
    this.fence = new Path(location);
  }

  /** The manager Spark would have made: the named class, or Spark's default and its fallback. */
  private static CheckpointFileManager delegate(Path path, Configuration conf) throws IOException {
    String name = conf.get(DELEGATE_KEY);
    if (name != null) {
      return instance(name, path, conf);
    }
    try {
      return instance(FILE_CONTEXT_MANAGER, path, conf);
    } catch (IOException unsupported) {
      return instance(FILE_SYSTEM_MANAGER, path, conf);
    }
  }

  private static CheckpointFileManager instance(String name, Path path, Configuration conf)
      throws IOException {
    try {
      return (CheckpointFileManager)
          Class.forName(name, true, Thread.currentThread().getContextClassLoader())
              .getConstructor(Path.class, Configuration.class)
              .newInstance(path, conf);
    } catch (ReflectiveOperationException e) {
      Throwable cause = e.getCause() != null ? e.getCause() : e;
      throw new IOException("eo: cannot create checkpoint manager " + name + ": " + cause, cause);
    }
  }

  /**
   * The highest epoch in the fence folder, or -1 when there is none.
   *
   * <p>A local folder is listed with {@code java.io.File}: Hadoop's local file system stats each
   * entry by running a process (no native library in PySpark), which cost ~50 ms per log write
   * here. A store is listed through its Hadoop file system (one LIST request).
   */
  public static long fenceEpoch(Path fence, Configuration conf) throws IOException {
    String scheme = fence.toUri().getScheme();
    String[] names;
    if (scheme == null || "file".equals(scheme)) {
      names = new java.io.File(fence.toUri().getPath()).list();
    } else {
      FileStatus[] entries;
      try {
        entries = fence.getFileSystem(conf).listStatus(fence);
      } catch (java.io.FileNotFoundException absent) {
        return -1L;
      }
      names = new String[entries.length];
      for (int i = 0; i < entries.length; i++) {
        names[i] = entries[i].getPath().getName();
      }
    }
    long highest = -1L;
    if (names == null) {
      return highest;
    }
    for (String name : names) {
      if (name.matches("[0-9]{1,18}")) {
        highest = Math.max(highest, Long.parseLong(name));
      }
    }
    return highest;
  }

  /**
   * Record {@code epoch} in the fence folder and drop the lower entries; returns the highest
   * epoch found before. A higher epoch already there is left alone and returned: the caller was
   * replaced and must not run.
   */
  public static long claim(Path fence, Configuration conf, long epoch) throws IOException {
    long before = fenceEpoch(fence, conf);
    if (before > epoch) {
      return before;
    }
    FileSystem fs = fence.getFileSystem(conf);
    fs.mkdirs(fence);
    Path own = new Path(fence, Long.toString(epoch));
    if (!fs.exists(own)) {
      fs.create(own, false).close();
    }
    for (FileStatus entry : fs.listStatus(fence)) {
      String name = entry.getPath().getName();
      if (name.matches("[0-9]{1,18}") && Long.parseLong(name) < epoch) {
        fs.delete(entry.getPath(), false);
      }
    }
    return before;
  }

  @SuppressWarnings("unchecked")
  private static <E extends Throwable> RuntimeException sneaky(Throwable e) throws E {
    throw (E) e;
  }

  private void check(Path path) throws IOException {
    long current = fenceEpoch(fence, conf);
    if (current > epoch) {
      throw new IOException(
          FENCED
              + ": epoch "
              + current
              + " took over this checkpoint ("
              + fence
              + "); this driver's epoch is "
              + epoch
              + ", so it must not write "
              + path);
    }
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    try {
      check(path);
    } catch (IOException e) {
      throw FencedCheckpointFileManager.<RuntimeException>sneaky(e);
    }
    return delegate.createAtomic(path, overwriteIfPossible);
  }

  @Override
  public FSDataInputStream open(Path path) {
    return delegate.open(path);
  }

  @Override
  public FileStatus[] list(Path path, PathFilter filter) {
    return delegate.list(path, filter);
  }

  @Override
  public void mkdirs(Path path) {
    delegate.mkdirs(path);
  }

  @Override
  public boolean exists(Path path) {
    return delegate.exists(path);
  }

  @Override
  public void delete(Path path) {
    delegate.delete(path);
  }

  @Override
  public boolean isLocal() {
    return delegate.isLocal();
  }

  @Override
  public Path createCheckpointDirectory() {
    return delegate.createCheckpointDirectory();
  }

  @Override
  public void close() {
    delegate.close();
  }
}

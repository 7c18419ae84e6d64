package dev.eo.writer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.util.Arrays;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class FencedCheckpointFileManagerTest {
  @TempDir java.nio.file.Path tmp;

  private Set<String> entries(java.nio.file.Path folder) throws IOException {
    try (var names = Files.list(folder)) {
      return names
          .map(p -> p.getFileName().toString())
          .filter(n -> !n.startsWith("."))
          .collect(Collectors.toSet());
    }
  }

  @Test
  void aClaimRecordsItsEpochDropsLowerOnesAndYieldsToAHigherOne() throws IOException {
    Configuration conf = new Configuration();
    Path fence = new Path(tmp.resolve("eo-fence").toUri());
    assertEquals(-1L, FencedCheckpointFileManager.fenceEpoch(fence, conf));
    assertEquals(-1L, FencedCheckpointFileManager.claim(fence, conf, 3));
    assertEquals(3L, FencedCheckpointFileManager.claim(fence, conf, 5));
    assertEquals(Set.of("5"), entries(tmp.resolve("eo-fence")));
    assertEquals(5L, FencedCheckpointFileManager.claim(fence, conf, 4)); // replaced: no entry
    assertEquals(Set.of("5"), entries(tmp.resolve("eo-fence")));
    Files.createFile(tmp.resolve("eo-fence").resolve("not-an-epoch"));
    assertEquals(5L, FencedCheckpointFileManager.fenceEpoch(fence, conf));
  }

  @Test
  void aDriverWhoseEpochWasOvertakenMayNotWriteTheLog() throws IOException {
    Path fence = new Path(tmp.resolve("eo-fence").toUri());
    Path checkpoint = new Path(tmp.resolve("checkpoint").toUri());
    Configuration conf = new Configuration();
    conf.setLong(FencedCheckpointFileManager.EPOCH_KEY, 2);
    conf.set(FencedCheckpointFileManager.FENCE_KEY, fence.toString());
    FencedCheckpointFileManager.claim(fence, conf, 2);
    FencedCheckpointFileManager manager = new FencedCheckpointFileManager(checkpoint, conf);
    manager.mkdirs(new Path(checkpoint, "offsets"));
    manager.createAtomic(new Path(checkpoint, "offsets/0"), false).close();
    assertTrue(manager.exists(new Path(checkpoint, "offsets/0")));

    FencedCheckpointFileManager.claim(fence, conf, 3); // the next driver
    IOException refused =
        assertThrows(
            IOException.class,
            () -> manager.createAtomic(new Path(checkpoint, "offsets/1"), false));
    assertTrue(refused.getMessage().startsWith(FencedCheckpointFileManager.FENCED), refused.getMessage());
    assertFalse(manager.exists(new Path(checkpoint, "offsets/1")));
    assertEquals(
        Set.of("0"),
        Arrays.stream(tmp.resolve("checkpoint/offsets").toFile().list())
            .filter(n -> !n.startsWith("."))
            .collect(Collectors.toSet()));
  }

  @Test
  void aManagerWithoutItsEpochAndFenceIsRefused() {
    IOException e =
        assertThrows(
            IOException.class,
            () -> new FencedCheckpointFileManager(new Path(tmp.toUri()), new Configuration()));
    assertTrue(e.getMessage().contains(FencedCheckpointFileManager.EPOCH_KEY), e.getMessage());
  }
}

package dev.eo.writer;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

class FaultsTest {
  private static Spec armed(String fault) {
    Spec spec = new Spec();
    spec.fault = fault;
    spec.batchId = 12;
    spec.driverPid = -1;
    return spec;
  }

  @Test
  void raiseFailsTheFirstAttemptOnly() {
    RuntimeException e =
        assertThrows(RuntimeException.class, () -> Faults.inject(armed("raise"), true));
    assertEquals("fault injected at after-some-prepared of batch 12", e.getMessage());
    assertDoesNotThrow(() -> Faults.inject(armed("raise"), false));
  }

  @Test
  void anUnknownActionIsRefused() {
    assertThrows(IllegalArgumentException.class, () -> Faults.inject(armed("explode"), true));
  }
}

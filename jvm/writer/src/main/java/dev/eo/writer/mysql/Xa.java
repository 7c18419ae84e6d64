package dev.eo.writer.mysql;

import dev.eo.writer.Spec;

/**
 * A task's xid, as {@code protocol.mysql_xa.xid_of} makes it from the task's gid: the driver
 * sends every part of it but the task's own (the gtrid, the bqual's head and tail), and the
 * task puts its partition and attempt between head and tail, 8 bytes each, big-endian, as
 * {@code xid_of} packs the gid's task and attempt. Recovery ({@code gid_of}) reads the gid back
 * from the xid alone.
 */
final class Xa {
  private Xa() {}

  /** {@code X'gtrid',X'bqual',formatID}, as {@code Xid.sql} writes it (lower-case hex). */
  static String xid(Spec.MySql my, int partition, long attemptId) {
    if (partition < 0 || attemptId < 0) {
      throw new IllegalArgumentException("a task's partition and attempt are not negative");
    }
    String bqual =
        my.bqualHead + String.format("%016x%016x", (long) partition, attemptId) + my.bqualTail;
    if (!my.gtrid.matches("[0-9a-f]{2,128}") || !bqual.matches("[0-9a-f]{2,128}")) {
      throw new IllegalArgumentException("not an xid: " + my.gtrid + ", " + bqual);
    }
    return "X'" + my.gtrid + "',X'" + bqual + "'," + my.formatId;
  }
}

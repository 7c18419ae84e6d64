package dev.eo.writer;

/**
 * A batch the JVM writer does not write, and why (a column without a form the kind's tasks
 * write, a JDBC driver missing): the driver writes it through the Python writer instead.
 */
public final class Unfit extends Exception {
  private static final long serialVersionUID = 1L;

  public Unfit(String reason) {
    super(reason);
  }
}

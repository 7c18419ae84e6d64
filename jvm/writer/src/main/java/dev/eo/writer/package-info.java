/**
 * eo's JVM writer, the parts no database owns: the driver's description of a sink's writer
 * tasks ({@link dev.eo.writer.Spec}), what every task does alike (its gid, the crash point, its
 * result line: {@link dev.eo.writer.Tasks}), refused rows found by halving ({@link
 * dev.eo.writer.Halving}) and written as the Python writers' JSON ({@link dev.eo.writer.Json}),
 * the Spark value kinds binary COPY carries ({@link dev.eo.writer.Kind}), the injected faults,
 * the fenced checkpoint manager, and the entry point the Python driver calls through Py4J
 * ({@link dev.eo.writer.PreparedCopy}).
 *
 * <p>Each database's writer tasks live in a package of their own beside this one ({@code
 * dev.eo.writer.postgres}: binary COPY, PREPARE TRANSACTION; {@code dev.eo.writer.mysql}:
 * multi-row INSERTs in an XA branch), and use only what is here.
 */
package dev.eo.writer;

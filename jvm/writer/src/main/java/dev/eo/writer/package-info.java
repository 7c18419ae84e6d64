/**
 * eo's JVM writer, the parts no database owns: the driver's description of a sink's writer
 * tasks ({@link dev.eo.writer.Spec}), the Spark value kinds a binary writer carries ({@link
 * dev.eo.writer.Kind}), the injected faults, the fenced checkpoint manager, and the entry point
 * the Python driver calls through Py4J ({@link dev.eo.writer.PreparedCopy}).
 *
 * <p>Each database's writer tasks live in a package of their own beside this one ({@code
 * dev.eo.writer.postgres}: binary COPY, PREPARE TRANSACTION), and use only what is here.
 */
package dev.eo.writer;

/**
 * PostgreSQL's writer tasks: Spark's internal rows in binary COPY form ({@link
 * dev.eo.writer.postgres.BinaryRows}), one transaction per task prepared under its gid ({@link
 * dev.eo.writer.postgres.TaskWriter}), refused rows isolated under savepoints ({@link
 * dev.eo.writer.postgres.Refusals}), connections opened patiently through pgJDBC.
 */
package dev.eo.writer.postgres;

/**
 * MySQL's and MariaDB's writer tasks: Spark's internal rows as the Python writer's literals
 * ({@link dev.eo.writer.mysql.Literals}), one XA branch per task with the same statements in
 * the same order ({@link dev.eo.writer.mysql.Branch}), refused rows found by halving and
 * written as dead letters in the branch, connections through MariaDB Connector/J.
 */
package dev.eo.writer.mysql;

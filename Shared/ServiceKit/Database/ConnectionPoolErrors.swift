// PostgresNIO's pool fails a lease with `ConnectionPoolError`, a type it declares in its
// `_ConnectionPoolModule` and re-exports through no public module: there is no supported way to
// tell "the pool gave up connecting" from any other error. This file is the one place in the product
// that imports the module. `DatabaseOutageTests` throws both cases through a real router and fails if they stop
// being recognised (say, if PostgresNIO renames or moves the type).
import _ConnectionPoolModule

/// Whether `error` is the pool saying PostgreSQL is out of reach: its circuit breaker tripped after
/// failed connection attempts, or it is shutting down.
func isPoolOutOfReach(_ error: any Error) -> Bool {
    guard let error = error as? ConnectionPoolError else { return false }
    return error == .connectionCreationCircuitBreakerTripped || error == .poolShutdown
}

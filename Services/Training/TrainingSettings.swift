import ServiceKit

/// The training service's own settings, read with the common ones.
struct TrainingSettings: Sendable {
    init(_ config: ServiceConfig) throws {
        let env = EnvironmentReader(config.environment)
        try env.finish()
    }
}

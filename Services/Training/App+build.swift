import Foundation
import Hummingbird
import ServiceKit

/// The training service: the exercise library and coaches' own exercises, coaches' workouts, the
/// sessions they assign to their clients, what clients log, and what coaches follow.
enum TrainingService {
    static let definition = ServiceDefinition(
        name: "training",
        defaultPort: ServiceRegistry.training.port,
        migrations: { try ServiceDefinition.bundledMigrations(.module) + [try ExerciseLibrary.migration(bundle: .module)] },
        openAPIDocument: ServiceDefinition.bundledOpenAPIDocument(.module),
        setup: { config in
            let settings = try TrainingSettings(config)
            return ServiceSetup(build: { router, dependencies in
                let training = Training(dependencies: dependencies, settings: settings)
                ExerciseRoutes(training: training).add(to: router)
                WorkoutRoutes(training: training).add(to: router)
                AssignmentRoutes(training: training).add(to: router)
                SessionRoutes(training: training).add(to: router)
                HistoryRoutes(training: training).add(to: router)
                SettingsRoutes(training: training).add(to: router)
                return ServiceComponents(handlers: TrainingEventHandlers(training: training).handlers)
            })
        }
    )
}

/// Builds the training application; `main` and the tests both call this.
func buildApplication(_ config: ServiceConfig) throws -> some ApplicationProtocol {
    try buildServiceApplication(TrainingService.definition, config: config)
}

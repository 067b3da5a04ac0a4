import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// The training domain: its stores, its settings, and the rules the routes share.
struct Training: Sendable {
    let postgres: PostgresClient
    let settings: TrainingSettings
    let logger: Logger
    let outbox: EventOutbox
    let exercises = ExerciseStore()
    let workouts = WorkoutStore()
    let timeZones = TimeZoneNames()

    init(dependencies: ServiceDependencies, settings: TrainingSettings) {
        postgres = dependencies.postgres
        self.settings = settings
        logger = dependencies.logger
        outbox = dependencies.outbox
    }
}

import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Events from auth and invitations: who coaches whom, and nothing left of a deleted account.
struct TrainingEventHandlers {
    let training: Training

    var handlers: EventHandlers {
        EventHandlers()
    }
}

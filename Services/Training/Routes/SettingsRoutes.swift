import Foundation
import Hummingbird
import PostgresNIO
import ServiceKit

/// The caller's time zone (the days of Today and My Workouts) and the unit weights are read in.
/// Any signed-in user: a coach reads their clients' weights in their own unit too.
struct SettingsRoutes {
    let training: Training

    func add(to router: Router<ServiceRequestContext>) {
        let settings = router.group("v1/training/settings", context: AuthenticatedContext.self)
        settings.get(use: read)
        settings.put(use: replace)
    }

    struct SettingsView: StrictJSONBody, ResponseEncodable {
        var timeZone: String
        var weightUnit: String
        enum CodingKeys: String, CodingKey, CaseIterable { case timeZone = "time_zone", weightUnit = "weight_unit" }
    }

    @Sendable func read(_ request: Request, context: AuthenticatedContext) async throws -> SettingsView {
        let training = self.training
        let settings = try await training.postgres.withConnectionOnItsLoop { connection in
            try await training.sessions.settings(of: context.caller.userID, on: connection, logger: context.logger)
        }
        return SettingsView(timeZone: settings.timeZone, weightUnit: settings.unit.rawValue)
    }

    @Sendable func replace(_ request: Request, context: AuthenticatedContext) async throws -> SettingsView {
        let body = try await request.decode(as: SettingsView.self, context: context)
        var problems: [Problem.FieldError] = []
        let unit = WeightUnit(rawValue: body.weightUnit)
        if unit == nil { problems.append(.init(field: "weight_unit", message: "must be kg or lbs")) }
        let zoneShape = body.timeZone.utf8.count <= 64 && body.timeZone.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "/_+-".contains($0)) }
        let training = self.training
        return try await training.postgres.transaction(logger: context.logger) { connection in
            var known = zoneShape && TimeZone(identifier: body.timeZone) != nil
            if known { known = try await training.timeZones.contains(body.timeZone, on: connection, logger: context.logger) }
            if !known {
                problems.append(.init(field: "time_zone", message: "must be an IANA time zone name, such as Europe/Lisbon"))
            }
            guard problems.isEmpty, let unit else { throw APIError.validation(problems) }
            try await connection.requireLiveAccount(context.caller.userID, logger: context.logger)
            try await training.sessions.saveSettings(.init(timeZone: body.timeZone, unit: unit), of: context.caller.userID, on: connection, logger: context.logger)
            return SettingsView(timeZone: body.timeZone, weightUnit: unit.rawValue)
        }
    }
}

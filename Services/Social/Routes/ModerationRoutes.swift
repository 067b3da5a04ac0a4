import Foundation
import Hummingbird
import ServiceKit

/// Moderators and admins: hide profiles, warn users.
struct ModerationRoutes {
    let social: Social

    func add(to router: Router<ServiceRequestContext>) {
        let moderation = router.group("v1/moderation", context: AuthenticatedContext.self)
        moderation.post("profiles/:id/hide", use: { request, context in try await setHidden(request, context: context, hidden: true) })
        moderation.post("profiles/:id/unhide", use: { request, context in try await setHidden(request, context: context, hidden: false) })
        moderation.post("users/:id/warnings", use: warn)
        moderation.get("users/:id/warnings", use: warnings)
    }

    struct HiddenState: Codable, Sendable {
        var id: UUID
        var hidden: Bool
    }

    /// A hidden profile is 404 to everyone but its owner and staff.
    @Sendable func setHidden(_ request: Request, context: AuthenticatedContext, hidden: Bool) async throws -> HiddenState {
        try context.require(anyOf: .moderator, .admin)
        let id = try context.profileID()
        let social = self.social
        let found = try await social.postgres.withConnectionOnItsLoop { connection in
            try await social.profiles.setHidden(id, hidden, on: connection, logger: context.logger)
        }
        guard found else { throw APIError.notFound("No such profile.") }
        context.logger.notice("profile visibility changed by staff", metadata: ["profile_id": "\(id)", "hidden": "\(hidden)"])
        return HiddenState(id: id, hidden: hidden)
    }

    struct WarningRequest: StrictJSONBody {
        var reason: String
        enum CodingKeys: String, CodingKey, CaseIterable { case reason }
    }

    /// Gives a warning (201). The same warning again (same moderator, user and reason) within
    /// `WarningStore.retryWindow` is taken as a retry of the first, whose response was lost: 200 with
    /// that one, so a client that retries after a timeout does not warn twice.
    @Sendable func warn(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<WarningView> {
        try context.require(anyOf: .moderator, .admin)
        let id = try context.profileID()
        let reason = try await request.decode(as: WarningRequest.self, context: context).reason.trimmingCharacters(in: .whitespacesAndNewlines)
        guard (1...1000).contains(reason.codePoints), !ProfileEdit.hasControlCharacters(reason.replacingOccurrences(of: "\n", with: " ")) else {
            throw APIError.validation([.init(field: "reason", message: "must be 1 to 1000 characters, without control characters")])
        }
        let social = self.social
        let (warning, isNew) = try await social.transaction(logger: context.logger) { connection in
            // The warning names its moderator: held until it commits, as every row naming an account is.
            try await connection.requireLiveAccount(context.caller.userID, logger: context.logger)
            // The profile's lock puts concurrent copies of one warning in a row, so the second finds the first.
            guard try await social.profiles.find(id: id, forUpdate: true, on: connection, logger: context.logger) != nil else { throw APIError.notFound("No such profile.") }
            if let given = try await social.warnings.recent(to: id, by: context.caller.userID, reason: reason, on: connection, logger: context.logger) {
                return (given, false)
            }
            return (try await social.warnings.add(to: id, by: context.caller.userID, reason: reason, on: connection, logger: context.logger), true)
        }
        return EditedResponse(status: isNew ? .created : .ok, response: warning)
    }

    @Sendable func warnings(_ request: Request, context: AuthenticatedContext) async throws -> Page<WarningView> {
        try context.require(anyOf: .moderator, .admin)
        let id = try context.profileID()
        let social = self.social
        return try await social.page(request) { connection, limit, after in
            guard try await social.profiles.find(id: id, on: connection, logger: context.logger) != nil else { throw APIError.notFound("No such profile.") }
            return try await social.warnings.list(for: id, includeModerator: true, limit: limit, after: after, on: connection, logger: context.logger)
        }
    }
}

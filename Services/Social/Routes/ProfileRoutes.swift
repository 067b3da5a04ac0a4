import Foundation
import Hummingbird
import ServiceKit

/// Reading and editing profiles, and finding people.
struct ProfileRoutes {
    let social: Social

    func add(to router: Router<ServiceRequestContext>) {
        let profiles = router.group("v1/profiles", context: AuthenticatedContext.self)
        profiles.get("me", use: me)
        profiles.patch("me", use: update)
        profiles.get("me/warnings", use: myWarnings)
        profiles.get("search", use: search)
        profiles.get("by-username/:username", use: byUsername)
        profiles.get(":id", use: profile)
    }

    /// The caller's profile, with its version as `ETag` (`If-Match` on `PATCH`).
    @Sendable func me(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<ProfileView> {
        let social = self.social
        let profile = try await social.postgres.withConnectionOnItsLoop { connection in
            try await social.ownProfile(context.caller, on: connection, logger: context.logger)
        }
        return EditedResponse(headers: [.eTag: EntityTag(updatedAt: profile.updatedAt).description], response: social.view(profile, relationship: nil, for: context.caller))
    }

    /// A partial update. Making the profile public approves every pending follow request; a change
    /// to dietary data or the display name is announced as `profile.updated`. With `If-Match`, only if the profile is still
    /// at that version (`412` otherwise).
    @Sendable func update(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<ProfileView> {
        let edit = try ProfileEdit(try await request.decode(as: JSONValue.self, context: context))
        let social = self.social
        let caller = context.caller
        let logger = context.logger
        let profile = try await social.transaction(logger: logger) { connection in
            let before = try await social.ownProfile(caller, forUpdate: true, on: connection, logger: logger)
            try EntityTag(updatedAt: before.updatedAt).check(ifMatchOf: request)
            let after = try await social.profiles.update(caller.userID, with: edit, on: connection, logger: logger)
            if before.isPrivate, !after.isPrivate {
                // Every request is answered: the notifications that asked for a response go.
                try await social.notifications.retractAll(caller.userID, .followRequest, on: connection, logger: logger)
                for requester in try await social.follows.approveAll(to: caller.userID, on: connection, logger: logger) {
                    try await social.outbox.write(FollowCreated(followerID: requester, followeeID: caller.userID), userID: requester, on: connection, logger: logger)
                    try await social.notifications.notify(requester, .followAccepted, actor: caller.userID, on: connection, logger: logger)
                }
            }
            if before.dietaryPreferences != after.dietaryPreferences || before.allergies != after.allergies || before.displayName != after.displayName {
                try await social.announce(after, on: connection, logger: logger)
            }
            // Counts may have moved with the approvals.
            return try await social.profiles.find(id: caller.userID, on: connection, logger: logger) ?? after
        }
        return EditedResponse(headers: [.eTag: EntityTag(updatedAt: profile.updatedAt).description], response: social.view(profile, relationship: nil, for: caller))
    }

    @Sendable func profile(_ request: Request, context: AuthenticatedContext) async throws -> ProfileView {
        let id = try context.profileID()
        let social = self.social
        let (profile, relationship) = try await social.postgres.withConnectionOnItsLoop { connection in
            try await social.visibleProfile(id, to: context.caller, on: connection, logger: context.logger)
        }
        return social.view(profile, relationship: relationship, for: context.caller)
    }

    @Sendable func byUsername(_ request: Request, context: AuthenticatedContext) async throws -> ProfileView {
        // A name that could not be chosen cannot be found (and never reaches the database).
        guard let username = context.parameters.get("username"), ProfileEdit.usernameProblem(username) == nil else {
            throw APIError.notFound("No such profile.")
        }
        let social = self.social
        let (profile, relationship) = try await social.postgres.withConnectionOnItsLoop { connection in
            try await social.visibleProfile(username: username, to: context.caller, on: connection, logger: context.logger)
        }
        return social.view(profile, relationship: relationship, for: context.caller)
    }

    /// People whose username or display name starts with `q`, by username.
    @Sendable func search(_ request: Request, context: AuthenticatedContext) async throws -> Page<ProfileSummary> {
        let query = (request.uri.queryParameters["q"].map(String.init) ?? "").trimmingCharacters(in: .whitespaces)
        guard (1...50).contains(query.codePoints), !ProfileEdit.hasControlCharacters(query) else {
            throw APIError.validation([.init(field: "q", message: "is required: 1 to 50 characters of a username or display name")])
        }
        let page = try PageRequest(query: request)
        let after = try page.position(SearchCursor.self)
        let social = self.social
        let rows = try await social.postgres.withConnectionOnItsLoop { connection in
            try await social.profiles.search(
                prefix: query, viewer: context.caller.userID, viewerIsStaff: context.caller.isStaff, limit: page.limit, after: after, on: connection, logger: context.logger)
        }
        let (items, next) = Cursor.page(rows, limit: page.limit) { SearchCursor(key: $0.1, id: $0.0.id) }
        return Page(items: items.map(\.0), nextCursor: next)
    }

    @Sendable func myWarnings(_ request: Request, context: AuthenticatedContext) async throws -> Page<WarningView> {
        let social = self.social
        return try await social.page(request) { connection, limit, after in
            try await social.warnings.list(for: context.caller.userID, includeModerator: false, limit: limit, after: after, on: connection, logger: context.logger)
        }
    }
}

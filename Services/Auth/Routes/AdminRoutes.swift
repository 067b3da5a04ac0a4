import Foundation
import Hummingbird
import ServiceKit

/// Account administration: search, roles, disable and enable. Admins only.
struct AdminRoutes {
    let accounts: Accounts

    func add(to router: Router<ServiceRequestContext>) {
        let admin = router.group("v1/admin/users", context: AuthenticatedContext.self)
        admin.get(use: list)
        admin.post(":id/roles/:role", use: { request, context in try await changeRole(request, context: context, add: true) })
        admin.delete(":id/roles/:role", use: { request, context in try await changeRole(request, context: context, add: false) })
        admin.post(":id/disable", use: { request, context in try await setDisabled(request, context: context, disabled: true) })
        admin.post(":id/enable", use: { request, context in try await setDisabled(request, context: context, disabled: false) })
    }

    @Sendable func list(_ request: Request, context: AuthenticatedContext) async throws -> Page<UserView> {
        _ = try await accounts.liveAdmin(context)
        let page = try PageRequest(query: request)
        let after = try page.position(UserCursor.self)
        let query = request.uri.queryParameters["query"].map(String.init).flatMap { $0.isEmpty ? nil : String($0.prefix(200)) }
        let accounts = self.accounts
        // One snapshot: each account's sign-in methods are read as of the page's moment.
        return try await accounts.postgres.snapshot(logger: context.logger) { connection in
            let rows = try await accounts.users.search(query: query, limit: page.limit, after: after, on: connection, logger: context.logger)
            let (items, next) = Cursor.page(rows, limit: page.limit) { UserCursor(createdAt: $0.createdAt, id: $0.id) }
            var views: [UserView] = []
            for user in items { views.append(try await accounts.view(of: user, on: connection)) }
            return Page(items: views, nextCursor: next)
        }
    }

    @Sendable func changeRole(_ request: Request, context: AuthenticatedContext, add: Bool) async throws -> UserView {
        _ = try await accounts.liveAdmin(context)
        let userID = try Self.userID(context)
        guard let role = context.parameters.get("role").flatMap(Role.init(rawValue:)) else {
            throw APIError.badRequest("Unknown role; roles are \(Role.allCases.map(\.rawValue).joined(separator: ", ")).", code: "invalid_role")
        }
        if userID == context.caller.userID {
            throw APIError.conflict("Admins cannot change their own roles; ask another admin.", code: "cannot_change_self")
        }
        let accounts = self.accounts
        return try await accounts.postgres.transaction(logger: context.logger) { connection in
            try await accounts.holdAdminChanges(by: context.caller.userID, on: connection)
            guard let user = try await accounts.users.find(id: userID, forUpdate: true, on: connection, logger: context.logger) else { throw APIError.notFound("No such user.") }
            let updated = try await accounts.changeRoles(of: user, adding: add ? [role] : [], removing: add ? [] : [role], on: connection)
            return try await accounts.view(of: updated, on: connection)
        }
    }

    /// A disabled account loses its sessions at once and cannot sign in until enabled.
    @Sendable func setDisabled(_ request: Request, context: AuthenticatedContext, disabled: Bool) async throws -> UserView {
        _ = try await accounts.liveAdmin(context)
        let userID = try Self.userID(context)
        if userID == context.caller.userID {
            throw APIError.conflict("Admins cannot disable or enable their own account.", code: "cannot_change_self")
        }
        let accounts = self.accounts
        return try await accounts.postgres.transaction(logger: context.logger) { connection in
            try await accounts.holdAdminChanges(by: context.caller.userID, on: connection)
            guard var user = try await accounts.users.find(id: userID, forUpdate: true, on: connection, logger: context.logger) else { throw APIError.notFound("No such user.") }
            if user.isDisabled != disabled {
                try await accounts.users.setDisabled(disabled, userID: userID, on: connection, logger: context.logger)
                if disabled { try await accounts.sessions.endAll(of: userID, on: connection, logger: context.logger) }
                try await accounts.outbox.write(UserStatusChanged(userID: userID, disabled: disabled), userID: userID, on: connection, logger: context.logger)
                user.disabledAt = disabled ? Date() : nil
            }
            return try await accounts.view(of: user, on: connection)
        }
    }

    private static func userID(_ context: AuthenticatedContext) throws -> UUID {
        guard let id = context.parameters.get("id").flatMap(UUID.init(parsing:)) else { throw APIError.notFound("No such user.") }
        return id
    }
}

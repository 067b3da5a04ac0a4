import Foundation
import ServiceKit

/// `auth create-admin EMAIL`: makes the first admin without going through the API. An existing
/// account gets the admin role; otherwise an account is created with its email marked verified and
/// the password from `ADMIN_PASSWORD` (or a generated one, printed once).
enum CreateAdmin {
    static func command(settings: AuthSettings, common: CommonPasswordList) -> ServiceCommand {
        ServiceCommand(usage: "create-admin EMAIL   (password from ADMIN_PASSWORD, or generated and printed)") { arguments, context in
            guard let email = arguments.first.flatMap(EmailAddress.init)?.mailbox else {
                throw ConfigurationError(problems: ["create-admin needs a valid email address: auth create-admin EMAIL"])
            }
            let users = UserStore()
            let logger = context.logger
            let outcome = try await context.postgres.transaction(logger: logger) { connection -> String in
                if let user = try await users.find(email: email, forUpdate: true, on: connection, logger: logger) {
                    guard !user.roles.contains(.admin) else { return "\(user.email) is already an admin" }
                    // Anyone can sign up with an address they do not own: only one proven by mail, with
                    // nothing kept that someone else set, becomes admin.
                    guard user.emailProvenByMail else {
                        throw ConfigurationError(problems: ["\(user.email) is not proven by mail; verify it from the app (or reset its password by mail) first"])
                    }
                    let roles = Role.ordered(user.roles + [.admin])
                    try await users.setRoles(roles, of: user.id, on: connection, logger: logger)
                    try await context.outbox.write(UserRolesChanged(userID: user.id, roles: roles, added: [.admin], removed: []), userID: user.id, on: connection, logger: logger)
                    return "\(user.email) is now an admin (roles reach the token at the next refresh)"
                }
                let given = context.config.environment["ADMIN_PASSWORD"]
                let password = given ?? OpaqueToken().value
                if let violation = PasswordPolicy(common: common).violation(password, email: email) {
                    throw ConfigurationError(problems: ["ADMIN_PASSWORD: \(violation)"])
                }
                let hash = try await PasswordHasher(cost: settings.bcryptCost).hash(password)
                guard let user = try await users.insert(email: email, emailVerified: true, passwordHash: hash, displayName: nil, roles: [.user, .admin], on: connection, logger: logger) else {
                    throw ConfigurationError(problems: ["\(email) was created concurrently; run the command again"])
                }
                try await context.outbox.write(UserRegistered(userID: user.id, email: user.email, displayName: nil, provider: "email"), userID: user.id, on: connection, logger: logger)
                try await context.outbox.write(UserRolesChanged(userID: user.id, roles: user.roles, added: [.admin], removed: []), userID: user.id, on: connection, logger: logger)
                return "created admin \(user.email)" + (given == nil ? " with password \(password) (change it after signing in)" : "")
            }
            print(outcome)
        }
    }
}

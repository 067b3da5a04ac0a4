import Hummingbird
import ServiceKit

/// The social service: profiles and onboarding, follows and follow requests, blocks and mutes,
/// notifications, moderation. Profiles come from auth's `user.registered`; `user.deleted` purges.
enum SocialService {
    static let definition = configured()

    /// The service; a test passes the `ImageDecoding` whose slots it holds.
    static func configured(imageDecoding: ImageDecoding? = nil) -> ServiceDefinition {
        ServiceDefinition(
            name: "social",
            defaultPort: ServiceRegistry.social.port,
            migrations: { try ServiceDefinition.bundledMigrations(.module) },
            openAPIDocument: ServiceDefinition.bundledOpenAPIDocument(.module),
            setup: { config in
                let settings = try SocialSettings(config, imageDecoding: imageDecoding)
                return ServiceSetup(build: { router, dependencies in
                    let social = Social(dependencies: dependencies, settings: settings)
                    ProfileRoutes(social: social).add(to: router)
                    OnboardingRoutes(social: social).add(to: router)
                    AvatarRoutes(social: social).add(to: router)
                    FollowRoutes(social: social).add(to: router)
                    BlockRoutes(social: social).add(to: router)
                    NotificationRoutes(social: social).add(to: router)
                    ModerationRoutes(social: social).add(to: router)
                    return ServiceComponents(handlers: SocialEventHandlers(social: social).handlers)
                })
            }
        )
    }
}

/// Builds the social application; `main` and the tests both call this.
func buildApplication(_ config: ServiceConfig) throws -> some ApplicationProtocol {
    try buildServiceApplication(SocialService.definition, config: config)
}

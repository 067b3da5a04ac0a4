import Hummingbird
import ServiceKit

/// The nutrition service: the diet profile, meals with an explained diet score (typed, or analysed
/// from a photo), the food composition table, daily weight and ketones, trends, share links with a
/// share card, and a coach's read-only view of a client.
enum NutritionService {
    static let definition = ServiceDefinition(
        name: "nutrition",
        defaultPort: ServiceRegistry.nutrition.port,
        migrations: { try ServiceDefinition.bundledMigrations(.module) + [try FoodTable.migration(bundle: .module)] },
        openAPIDocument: ServiceDefinition.bundledOpenAPIDocument(.module),
        setup: { config in
            let settings = try NutritionSettings(config)
            let pages = try PageRenderer(directory: PageRenderer.bundledDirectory(.module), settings: settings.pages, expecting: SharedPageRoutes.templates)
            // An analysis may call its provider twice (an unusable answer is asked for again), each
            // call up to the timeout: a retry with its key waits for it rather than run it again.
            let abandonedAfter = max(.seconds(60), settings.analyzer.timeout * 2 + .seconds(30))
            // A photo with its form's other fields, as `MealPhoto.read` takes it.
            let photo = settings.mealPhotoMaxBytes + MealPhoto.formAllowance
            return ServiceSetup(
                idempotencyAbandonedAfter: abandonedAfter,
                bodyLimits: BodyLimits(limits: ["/v1/meals/analyze": photo, "/v1/meals/*/photo": photo]),
                build: { router, dependencies in
                    let nutrition = try Nutrition(dependencies: dependencies, settings: settings, drawing: .singleton)
                    DietProfileRoutes(nutrition: nutrition).add(to: router)
                    MealRoutes(nutrition: nutrition).add(to: router)
                    AnalyzeRoutes(nutrition: nutrition).add(to: router)
                    FoodRoutes(nutrition: nutrition).add(to: router)
                    MealPhotoRoutes(nutrition: nutrition).add(to: router)
                    ShareRoutes(nutrition: nutrition).add(to: router)
                    SharedPageRoutes(nutrition: nutrition, pages: pages).add(to: router)
                    MetricRoutes(nutrition: nutrition).add(to: router)
                    TrendRoutes(nutrition: nutrition).add(to: router)
                    CoachViewRoutes(nutrition: nutrition).add(to: router)
                    return ServiceComponents(handlers: NutritionEventHandlers(nutrition: nutrition).handlers, services: nutrition.profileChanges.map { [$0] } ?? [])
                })
        }
    )
}

/// Builds the nutrition application; `main` and the tests both call this.
func buildApplication(_ config: ServiceConfig) throws -> some ApplicationProtocol {
    try buildServiceApplication(NutritionService.definition, config: config)
}

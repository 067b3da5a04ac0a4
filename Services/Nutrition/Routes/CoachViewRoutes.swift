import Hummingbird
import ServiceKit

/// A coach reads a linked client's diary, never writes it: the client's own read routes under
/// `/v1/nutrition/clients/{client_user_id}`, with the same parameters and answers. Anyone else, and
/// the coach once unlinked, gets `404`.
struct CoachViewRoutes {
    let nutrition: Nutrition

    func add(to router: Router<ServiceRequestContext>) {
        let client = router.group("v1/nutrition/clients/:client_user_id", context: AuthenticatedContext.self)
        let meals = MealRoutes(nutrition: nutrition)
        let metrics = MetricRoutes(nutrition: nutrition)
        client.get("meals", use: meals.list)
        client.get("metrics/weight", use: metrics.weights)
        client.get("metrics/ketones", use: metrics.ketones)
        client.get("trends", use: TrendRoutes(nutrition: nutrition).trend)
    }
}

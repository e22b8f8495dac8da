"""The what-if pages, under /manage/whatif/ beside the other administration pages."""

from django.urls import path

from whatif import views

urlpatterns = [
    path("manage/whatif/", views.whatif_new, name="manage_whatif"),
    path("manage/whatif/<int:run_id>/", views.whatif_run, name="manage_whatif_run"),
    path("manage/whatif/<int:run_id>/apply/", views.whatif_apply, name="manage_whatif_apply"),
]
